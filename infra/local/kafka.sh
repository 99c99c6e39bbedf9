#!/usr/bin/env bash
# Apache Kafka 4 (KRaft, broker and controller in one JVM per node) for local development and
# tests, run from the Maven Central jars: one node (the default, what the tests and CI use) or
# a local cluster of NOTIFY_LOCAL_KAFKA_NODES combined nodes.
#
#   bash infra/local/kafka.sh start|stop|restart|kill|status [--node N]
#
# start   fetches the jars once (mvn, cached in .local/kafka/libs), renders the config,
#         formats the storage once, starts the broker on 127.0.0.1:19092 (controller on
#         19093) and returns only when it answers a metadata request; a no-op when it runs.
# stop    SIGTERM (controlled shutdown), waits up to 60s, then SIGKILL.
# restart stop, then start.
# kill    SIGKILL: a crash, for outage tests. The next start recovers.
# status  prints whether it runs, where, the cluster id and the version.
#
# A cluster: NOTIFY_LOCAL_KAFKA_NODES=3 (or up.sh --brokers 3). Node N (1..3) has node.id N
# and listens on NOTIFY_LOCAL_KAFKA_PORT + 2(N-1) for clients and
# NOTIFY_LOCAL_KAFKA_CONTROLLER_PORT + 2(N-1) for the controller quorum: 19092/19093,
# 19094/19095, 19096/19097 by default. Every node is a voter; internal topics and the broker's
# default get replication factor min(3, nodes) and min.insync.replicas one fewer. Each node
# has its own data (.local/kafka/cluster/node-N) and log (.local/log/kafka-N.log).
# Without --node a command acts on every node; with --node N on that node only (start waits
# until the cluster's metadata lists it again). Commands other than a full start remember
# the node count of the last start (.local/kafka/nodes), so `kafka.sh kill --node 2` needs no
# NOTIFY_LOCAL_KAFKA_NODES; the port overrides must be repeated.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_SRC="$INFRA_DIR/kafka"
KAFKA_POM="$KAFKA_SRC/pom.xml"
KAFKA_DIR="$LOCAL_DIR/kafka"
KAFKA_LIBS="$KAFKA_DIR/libs"
KAFKA_PING="$LOCAL_DIR/bin/kafkaping"
KAFKA_START_TIMEOUT=120
KAFKA_STALE=0
# The cluster layout a multi-node start used, so that later commands without
# NOTIFY_LOCAL_KAFKA_NODES (kill --node 2, status, down.sh) act on it.
KAFKA_LAYOUT_FILE="$KAFKA_DIR/nodes"

# The one place the version is set is the pom.
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM" | head -n 1)"
[[ -n "$KAFKA_VERSION" ]] || die "no <kafka.version> in $KAFKA_POM"

kafka_java_opts() {
	KAFKA_JAVA_OPTS=()
	if ((KAFKA_NODES == 1)); then
		KAFKA_JAVA_OPTS+=(-Xms512m -Xmx1g)
	else
		# Three JVMs share this machine's two cores with Postgres and the pipeline: a smaller
		# heap each (3 x 768 MiB) and fewer GC threads, so a collection in one broker does not
		# take both cores from the other two.
		KAFKA_JAVA_OPTS+=(-Xms384m -Xmx768m -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1)
	fi
	KAFKA_JAVA_OPTS+=(
		-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
		-XX:+ExitOnOutOfMemoryError
		-Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2.xml"
	)
}

# kafka_layout [start] sets KAFKA_NODES: NOTIFY_LOCAL_KAFKA_NODES when set; otherwise, except
# for a start of every node, the layout the last multi-node start recorded; otherwise 1.
kafka_layout() {
	local n="${NOTIFY_LOCAL_KAFKA_NODES:-}"
	if [[ -z "$n" && "${1:-}" != start && -s "$KAFKA_LAYOUT_FILE" ]]; then
		n="$(cat "$KAFKA_LAYOUT_FILE")"
	fi
	n="${n:-1}"
	[[ "$n" =~ ^[1-9]$ ]] || die "NOTIFY_LOCAL_KAFKA_NODES (or --brokers) must be a node count from 1 to 9, got \"$n\""
	KAFKA_NODES="$n"
	# Topics and internal topics: three copies when there are three nodes, one lost node
	# tolerated by writers with acks=all (min ISR = RF - 1, never 0).
	KAFKA_RF=$((n < 3 ? n : 3))
	KAFKA_MIN_ISR=$((KAFKA_RF > 1 ? KAFKA_RF - 1 : 1))
	KAFKA_ALL_BROKERS=""
	local i
	for ((i = 1; i <= n; i++)); do
		KAFKA_ALL_BROKERS+="${KAFKA_ALL_BROKERS:+,}$KAFKA_HOST:$(kafka_node_port "$i")"
	done
	kafka_java_opts
}

# Node i listens on the base ports + 2(i-1): 19092/19093, 19094/19095, 19096/19097 by default,
# and likewise from NOTIFY_LOCAL_KAFKA_PORT / NOTIFY_LOCAL_KAFKA_CONTROLLER_PORT.
kafka_node_port() { echo $((KAFKA_PORT + 2 * ($1 - 1))); }
kafka_node_controller_port() { echo $((KAFKA_CONTROLLER_PORT + 2 * ($1 - 1))); }

# kafka_select_node I points the per-node variables at node I. A single node keeps the paths
# it always had (.local/kafka/{data,config,kafka.pid}, .local/log/kafka.log); the nodes of a
# cluster live in .local/kafka/cluster/node-I with logs .local/log/kafka-I.log.
kafka_select_node() {
	KAFKA_NODE="$1"
	KAFKA_NODE_PORT="$(kafka_node_port "$1")"
	KAFKA_NODE_CONTROLLER_PORT="$(kafka_node_controller_port "$1")"
	if ((KAFKA_NODES == 1)); then
		KAFKA_NODE_DIR="$KAFKA_DIR"
		KAFKA_DATA="$KAFKA_DIR/data"
		KAFKA_CONFIG_DIR="$KAFKA_DIR/config"
		KAFKA_CLUSTER_ID_FILE="$KAFKA_DIR/cluster-id"
		KAFKA_LOG="$LOG_DIR/kafka.log"
		KAFKA_NAME=kafka
	else
		KAFKA_NODE_DIR="$KAFKA_DIR/cluster/node-$1"
		KAFKA_DATA="$KAFKA_NODE_DIR/data"
		KAFKA_CONFIG_DIR="$KAFKA_NODE_DIR/config"
		KAFKA_CLUSTER_ID_FILE="$KAFKA_DIR/cluster/cluster-id"
		KAFKA_LOG="$LOG_DIR/kafka-$1.log"
		KAFKA_NAME="kafka-$1"
	fi
	KAFKA_CONFIG="$KAFKA_CONFIG_DIR/server.properties"
	KAFKA_PID="$KAFKA_NODE_DIR/kafka.pid"
	KAFKA_BROKERS="$KAFKA_HOST:$KAFKA_NODE_PORT"
}

# Kafka 4's broker needs Java 17 or newer; Maven fetches the jars.
kafka_tools() {
	require_java 17 "Kafka $KAFKA_VERSION"
}

# Jars are cached: .local/kafka/libs/.stamp records the pom they were fetched for.
kafka_libs() {
	maven_libs "$KAFKA_POM" "$KAFKA_LIBS" "kafka=$KAFKA_VERSION" "kafka_2.13-$KAFKA_VERSION.jar" \
		"Kafka $KAFKA_VERSION" "$LOG_DIR/mvn-kafka.log"
}

# The readiness probe is a small Go program (franz-go): built once per source change.
kafka_ping_binary() {
	local stamp want
	want="$(cat "$INFRA_DIR/kafkaping/main.go" "$NOTIFY_ROOT/go.mod" "$NOTIFY_ROOT/go.sum" | sha256sum | cut -c1-16)"
	stamp="$KAFKA_PING.stamp"
	if [[ -x "$KAFKA_PING" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		return
	fi
	command -v go >/dev/null 2>&1 || die "go is not on PATH; it builds the Kafka readiness probe (infra/local/kafkaping)"
	mkdir -p "$(dirname "$KAFKA_PING")"
	local build_log="$LOG_DIR/kafkaping-build.log"
	if ! (cd "$NOTIFY_ROOT" && go build -o "$KAFKA_PING" ./infra/local/kafkaping) >"$build_log" 2>&1 </dev/null 9>&-; then
		die_with_log "could not build the Kafka readiness probe (go build ./infra/local/kafkaping)" "$build_log"
	fi
	printf '%s\n' "$want" >"$stamp"
}

kafka_render_config() {
	mkdir -p "$KAFKA_CONFIG_DIR" "$KAFKA_DATA"
	local tmp quorum i
	if ((KAFKA_NODES == 1)); then
		quorum="controller.quorum.bootstrap.servers=$KAFKA_HOST:$KAFKA_NODE_CONTROLLER_PORT"
	else
		quorum="controller.quorum.voters="
		for ((i = 1; i <= KAFKA_NODES; i++)); do
			((i > 1)) && quorum+=","
			quorum+="$i@$KAFKA_HOST:$(kafka_node_controller_port "$i")"
		done
	fi
	tmp="$(mktemp)"
	sed -e "s|@HOST@|$KAFKA_HOST|g" \
		-e "s|@PORT@|$KAFKA_NODE_PORT|g" \
		-e "s|@CONTROLLER_PORT@|$KAFKA_NODE_CONTROLLER_PORT|g" \
		-e "s|@DATA_DIR@|$KAFKA_DATA|g" \
		-e "s|@NODE_ID@|$KAFKA_NODE|g" \
		-e "s|@QUORUM@|$quorum|g" \
		-e "s|@RF@|$KAFKA_RF|g" \
		-e "s|@MIN_ISR@|$KAFKA_MIN_ISR|g" \
		"$KAFKA_SRC/server.properties.in" >"$tmp"
	KAFKA_CONFIG_CHANGED=0
	if ! cmp -s "$tmp" "$KAFKA_CONFIG"; then
		KAFKA_CONFIG_CHANGED=1
		mv "$tmp" "$KAFKA_CONFIG"
	else
		rm -f "$tmp"
	fi
}

# kafka_random_uuid prints a cluster id the way Kafka's Uuid.randomUuid does (16 random bytes,
# URL-safe base64 without padding, never starting with "-"), without a JVM start for
# `StorageTool random-uuid`.
kafka_random_uuid() {
	local id
	while :; do
		id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
		[[ "$id" =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{21}$ ]] && break
	done
	printf '%s' "$id"
}

# Format once; the cluster id is kept in .local/kafka/cluster-id (one node) or
# .local/kafka/cluster/cluster-id (every node of a cluster shares it), and in meta.properties.
kafka_format() {
	if [[ -f "$KAFKA_DATA/meta.properties" ]]; then
		if [[ ! -f "$KAFKA_CLUSTER_ID_FILE" ]]; then
			sed -n 's/^cluster.id=//p' "$KAFKA_DATA/meta.properties" >"$KAFKA_CLUSTER_ID_FILE"
		fi
		return
	fi
	local id quorum=(--standalone)
	if ((KAFKA_NODES > 1)) && [[ -s "$KAFKA_CLUSTER_ID_FILE" ]]; then
		id="$(cat "$KAFKA_CLUSTER_ID_FILE")"
	else
		id="$(kafka_random_uuid)"
	fi
	# A cluster's voters are static (controller.quorum.voters): no --standalone.
	((KAFKA_NODES > 1)) && quorum=()
	info "formatting $KAFKA_NAME storage in $KAFKA_DATA (cluster id $id)"
	if ! java -cp "$KAFKA_LIBS/*" "-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2.xml" \
		kafka.tools.StorageTool format "${quorum[@]}" --cluster-id "$id" --config "$KAFKA_CONFIG" \
		>>"$KAFKA_LOG" 2>&1 </dev/null 9>&-; then
		die_with_log "kafka.tools.StorageTool format failed" "$KAFKA_LOG"
	fi
	mkdir -p "$(dirname "$KAFKA_CLUSTER_ID_FILE")"
	printf '%s\n' "$id" >"$KAFKA_CLUSTER_ID_FILE"
}

kafka_ping() {
	"$KAFKA_PING" -brokers "$KAFKA_BROKERS" "$@" 9>&-
}

# kafka_check_layout refuses to start one layout while the other runs: a single node and
# node 1 of a cluster use the same ports and the same NOTIFY_KAFKA_BROKERS default, and a
# cluster formatted for N voters cannot be started as another size.
kafka_check_layout() {
	local pattern other
	if ((KAFKA_NODES == 1)); then
		pattern="kafka.Kafka $KAFKA_DIR/cluster/node-"
		other="a local Kafka cluster of this checkout"
	else
		pattern="kafka.Kafka $KAFKA_DIR/config/server.properties"
		other="the single-node Kafka of this checkout"
	fi
	if pgrep -f -- "$pattern" >/dev/null 2>&1; then
		die "$other is running; stop it first (bash infra/local/down.sh kafka, with the same NOTIFY_LOCAL_KAFKA_* settings it was started with)"
	fi
	if ((KAFKA_NODES > 1)) && [[ -s "$KAFKA_DIR/cluster/formatted-nodes" ]]; then
		local formatted
		formatted="$(cat "$KAFKA_DIR/cluster/formatted-nodes")"
		if [[ "$formatted" != "$KAFKA_NODES" ]]; then
			die "the cluster in $KAFKA_DIR/cluster was formatted with $formatted nodes, not $KAFKA_NODES; start it with NOTIFY_LOCAL_KAFKA_NODES=$formatted, or delete it: NOTIFY_LOCAL_KAFKA_NODES=$formatted bash infra/local/reset.sh kafka"
		fi
	fi
}

# kafka_find sets KAFKA_RUNNING_PID to the pid of the selected node's broker, or fails. A
# pid file whose process is gone, or is some other program now, is stale: removed, and
# KAFKA_STALE=1 (unless called as "kafka_find readonly", for status).
kafka_find() {
	local pid
	KAFKA_RUNNING_PID=""
	if [[ -s "$KAFKA_PID" ]]; then
		pid="$(head -n 1 "$KAFKA_PID")"
		if [[ "$pid" =~ ^[0-9]+$ ]] && kafka_is_ours "$pid"; then
			KAFKA_RUNNING_PID="$pid"
			return 0
		fi
		if [[ "${1:-}" != readonly ]]; then
			rm -f "$KAFKA_PID"
		fi
		KAFKA_STALE=1
	fi
	# The pid file can be lost while the broker runs (someone deleted .local/kafka/kafka.pid):
	# find the JVM started with this node's config file.
	pid="$(pgrep -f -- "kafka.Kafka $KAFKA_CONFIG" | head -n 1 || true)"
	if [[ -n "$pid" ]] && kafka_is_ours "$pid"; then
		[[ "${1:-}" == readonly ]] || printf '%s\n' "$pid" >"$KAFKA_PID"
		KAFKA_RUNNING_PID="$pid"
		return 0
	fi
	return 1
}

kafka_is_ours() {
	local cmdline
	cmdline="$( { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null)" || return 1
	[[ "$cmdline" == *"kafka.Kafka $KAFKA_CONFIG"* ]]
}

# kafka_launch starts the selected node unless it runs (KAFKA_ALREADY=1, KAFKA_RUNNING_PID)
# and returns without waiting (KAFKA_RUNNING_PID is the new JVM): the nodes of a cluster
# must all be started before any of them can elect a controller.
KAFKA_TOOLS_READY=0
kafka_launch() {
	KAFKA_STALE=0
	KAFKA_ALREADY=0
	kafka_render_config
	if kafka_find; then
		KAFKA_ALREADY=1
		return
	fi
	if ((KAFKA_STALE)); then
		info "$KAFKA_NAME: removed a stale pid file (the broker had crashed or was killed)"
	fi
	local port
	for port in "$KAFKA_NODE_PORT" "$KAFKA_NODE_CONTROLLER_PORT"; do
		if port_open "$KAFKA_HOST" "$port"; then
			die "port $KAFKA_HOST:$port is taken by another program, not this project's Kafka: $(ss -Hltnp "sport = :$port" 2>/dev/null | awk '{print $NF}' | head -n 1). Stop it, then re-run."
		fi
	done
	if ((!KAFKA_TOOLS_READY)); then
		kafka_tools
		kafka_libs
		KAFKA_TOOLS_READY=1
	fi
	kafka_format

	info "starting $KAFKA_NAME $KAFKA_VERSION on $KAFKA_BROKERS (data $KAFKA_DATA, log $KAFKA_LOG)"
	printf '\n==== %s start ====\n' "$(date -u +%FT%TZ)" >>"$KAFKA_LOG"
	# setsid: the broker must outlive the shell (and test process) that started it, and not
	# receive its terminal's signals. In a script the subshell is no group leader, so setsid
	# execs in place and $! is the JVM's pid.
	(
		cd "$KAFKA_NODE_DIR"
		close_inherited_fds
		exec setsid java "${KAFKA_JAVA_OPTS[@]}" -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_CONFIG"
	) >>"$KAFKA_LOG" 2>&1 </dev/null &
	KAFKA_RUNNING_PID=$!
	printf '%s\n' "$KAFKA_RUNNING_PID" >"$KAFKA_PID"
}

# kafka_wait_ready PID waits until the selected node answers a metadata request that lists
# it (a cluster node) or any broker (one node).
kafka_wait_ready() {
	local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT)) desc="" want=()
	((KAFKA_NODES > 1)) && want=(-nodes "$KAFKA_NODE")
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$KAFKA_PID"
			die_with_log "$KAFKA_NAME exited during start-up" "$KAFKA_LOG"
		fi
		if port_open "$KAFKA_HOST" "$KAFKA_NODE_PORT" && desc="$(kafka_ping "${want[@]}" 2>&1)"; then
			break
		fi
		if ((SECONDS >= deadline)); then
			die_with_log "$KAFKA_NAME did not answer on $KAFKA_BROKERS within ${KAFKA_START_TIMEOUT}s (pid $pid still running; last probe: ${desc:-port closed})" "$KAFKA_LOG"
		fi
		sleep 0.3
	done
	KAFKA_READY_DESC="$desc"
}

# kafka_nodes_to_act_on: the --node given, or every node.
kafka_nodes_to_act_on() {
	if [[ -n "$KAFKA_ONLY_NODE" ]]; then
		KAFKA_ACT_NODES=("$KAFKA_ONLY_NODE")
	else
		KAFKA_ACT_NODES=()
		local i
		for ((i = 1; i <= KAFKA_NODES; i++)); do KAFKA_ACT_NODES+=("$i"); done
	fi
}

kafka_start() {
	local t0 i
	t0="$(now)"
	with_lock kafka
	mkdir -p "$KAFKA_DIR"
	kafka_ping_binary
	kafka_check_layout
	kafka_nodes_to_act_on
	# Recorded before anything starts, so that a half-started cluster can still be stopped by
	# commands that do not repeat NOTIFY_LOCAL_KAFKA_NODES.
	printf '%s\n' "$KAFKA_NODES" >"$KAFKA_LAYOUT_FILE"
	if ((KAFKA_NODES > 1)); then
		mkdir -p "$KAFKA_DIR/cluster"
		printf '%s\n' "$KAFKA_NODES" >"$KAFKA_DIR/cluster/formatted-nodes"
	fi

	local started=() pids=() running=() changed=()
	for i in "${KAFKA_ACT_NODES[@]}"; do
		kafka_select_node "$i"
		kafka_launch
		if ((KAFKA_ALREADY)); then
			running+=("$i")
			changed+=("$KAFKA_CONFIG_CHANGED")
		else
			started+=("$i")
			pids+=("$KAFKA_RUNNING_PID")
		fi
	done
	# Nodes that already ran are checked after the others were launched: a cluster node
	# answers only once a quorum of voters runs.
	local k desc
	for k in "${!running[@]}"; do
		kafka_select_node "${running[$k]}"
		kafka_find || die_with_log "$KAFKA_NAME exited" "$KAFKA_LOG"
		if ! desc="$(kafka_ping -wait 60s 2>&1)"; then
			die_with_log "$KAFKA_NAME runs (pid $KAFKA_RUNNING_PID) but does not answer on $KAFKA_BROKERS: $desc" "$KAFKA_LOG"
		fi
		if ((changed[k])); then
			if ((KAFKA_NODES == 1)); then
				warn "server.properties changed; restart Kafka to apply it: bash infra/local/kafka.sh restart"
			else
				warn "server.properties of $KAFKA_NAME changed; restart it to apply it: bash infra/local/kafka.sh restart --node ${running[$k]}"
			fi
		fi
		info "$KAFKA_NAME already running on $KAFKA_BROKERS (pid $KAFKA_RUNNING_PID)"
	done
	((${#started[@]} > 0)) || return 0
	for k in "${!started[@]}"; do
		kafka_select_node "${started[$k]}"
		kafka_wait_ready "${pids[$k]}"
		if ((KAFKA_NODES == 1)); then
			info "kafka ready on $KAFKA_BROKERS in $(elapsed "$t0") ($KAFKA_READY_DESC)"
		else
			info "$KAFKA_NAME ready on $KAFKA_BROKERS in $(elapsed "$t0")"
		fi
	done
	if ((KAFKA_NODES > 1)) && [[ -z "$KAFKA_ONLY_NODE" ]]; then
		local all
		all="$(seq -s, 1 "$KAFKA_NODES")"
		if ! desc="$("$KAFKA_PING" -brokers "$KAFKA_ALL_BROKERS" -nodes "$all" -wait 60s 2>&1 9>&-)"; then
			die "the cluster's metadata does not list every node ($all) within 60s: $desc (logs $LOG_DIR/kafka-N.log)"
		fi
		info "kafka cluster of $KAFKA_NODES nodes ready on $KAFKA_ALL_BROKERS in $(elapsed "$t0") ($desc)"
	fi
}

kafka_wait_exit() {
	local pid="$1" secs="$2"
	local deadline=$((SECONDS + secs))
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# kafka_stop signals every selected node at once and then waits for each: stopped one after
# another, the last nodes of a cluster would wait out their controlled shutdown without a
# quorum.
kafka_stop() {
	with_lock kafka
	kafka_nodes_to_act_on
	local i names=() pids=() k
	for i in "${KAFKA_ACT_NODES[@]}"; do
		kafka_select_node "$i"
		if ! kafka_find; then
			info "$KAFKA_NAME is not running"
			continue
		fi
		info "stopping $KAFKA_NAME (SIGTERM, controlled shutdown) ..."
		kill -TERM "$KAFKA_RUNNING_PID" 2>/dev/null || true
		names+=("$i")
		pids+=("$KAFKA_RUNNING_PID")
	done
	for k in "${!names[@]}"; do
		kafka_select_node "${names[$k]}"
		local pid="${pids[$k]}"
		if ! kafka_wait_exit "$pid" 60; then
			warn "$KAFKA_NAME did not stop within 60s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			kafka_wait_exit "$pid" 30 || die "$KAFKA_NAME (pid $pid) survived SIGKILL for 30s"
		fi
		rm -f "$KAFKA_PID"
		info "$KAFKA_NAME stopped"
	done
}

kafka_kill() {
	with_lock kafka
	kafka_nodes_to_act_on
	local i pid
	for i in "${KAFKA_ACT_NODES[@]}"; do
		kafka_select_node "$i"
		if ! kafka_find; then
			info "$KAFKA_NAME is not running"
			continue
		fi
		pid="$KAFKA_RUNNING_PID"
		info "killing $KAFKA_NAME (SIGKILL to pid $pid)"
		kill -KILL "$pid" 2>/dev/null || true
		kafka_wait_exit "$pid" 30 || die "$KAFKA_NAME (pid $pid) survived SIGKILL for 30s"
		info "$KAFKA_NAME killed (pid file left behind, as after a crash)"
	done
}

kafka_status() {
	kafka_nodes_to_act_on
	local i pid id="" rc=0
	for i in "${KAFKA_ACT_NODES[@]}"; do
		kafka_select_node "$i"
		KAFKA_STALE=0
		[[ -f "$KAFKA_CLUSTER_ID_FILE" ]] && id="$(cat "$KAFKA_CLUSTER_ID_FILE")"
		if kafka_find readonly; then
			pid="$KAFKA_RUNNING_PID"
			if [[ -x "$KAFKA_PING" ]] && kafka_ping >/dev/null 2>&1; then
				printf '%-9s running  pid %s  %s (controller %s:%s)  version %s  cluster %s\n' \
					"$KAFKA_NAME" "$pid" "$KAFKA_BROKERS" "$KAFKA_HOST" "$KAFKA_NODE_CONTROLLER_PORT" "$KAFKA_VERSION" "${id:-?}"
				printf '          data %s  log %s\n' "$KAFKA_DATA" "$KAFKA_LOG"
				continue
			fi
			printf '%-9s starting or not answering  pid %s  log %s\n' "$KAFKA_NAME" "$pid" "$KAFKA_LOG"
			rc=1
			continue
		fi
		local how=stopped
		((KAFKA_STALE)) && how="stopped (crashed: stale pid file)"
		printf '%-9s %s  data %s  log %s\n' "$KAFKA_NAME" "$how" "$KAFKA_DATA" "$KAFKA_LOG"
		rc=1
	done
	return $rc
}

usage() {
	echo "usage: $0 start|stop|restart|kill|status [--node N]" >&2
	exit 2
}

cmd="${1:-}"
shift || true
KAFKA_ONLY_NODE=""
while (($# > 0)); do
	case "$1" in
	--node)
		(($# >= 2)) || usage
		KAFKA_ONLY_NODE="$2"
		shift 2
		;;
	--node=*)
		KAFKA_ONLY_NODE="${1#--node=}"
		shift
		;;
	*) usage ;;
	esac
done
if [[ "$cmd" == start && -z "$KAFKA_ONLY_NODE" ]]; then
	kafka_layout start
else
	kafka_layout
fi
if [[ -n "$KAFKA_ONLY_NODE" ]]; then
	[[ "$KAFKA_ONLY_NODE" =~ ^[0-9]+$ ]] && ((KAFKA_ONLY_NODE >= 1 && KAFKA_ONLY_NODE <= KAFKA_NODES)) ||
		die "--node must be a node id from 1 to $KAFKA_NODES (the cluster has $KAFKA_NODES node(s); NOTIFY_LOCAL_KAFKA_NODES sets the count), got \"$KAFKA_ONLY_NODE\""
fi

case "$cmd" in
start) kafka_start ;;
stop) kafka_stop ;;
restart)
	kafka_stop
	exec 9>&-
	kafka_start
	;;
kill) kafka_kill ;;
status) kafka_status ;;
*) usage ;;
esac
