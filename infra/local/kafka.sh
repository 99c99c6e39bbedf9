#!/usr/bin/env bash
# Single-node Apache Kafka 4 (KRaft, broker and controller in one JVM) for local development
# and tests, run from the Maven Central jars.
#
#   bash infra/local/kafka.sh start|stop|restart|kill|status
#
# start   fetches the jars once (mvn, cached in .local/kafka/libs), renders the config,
#         formats the storage once, starts the broker on 127.0.0.1:19092 (controller on
#         19093) and returns only when it answers a metadata request; a no-op when it runs.
# stop    SIGTERM (controlled shutdown), waits up to 60s, then SIGKILL.
# restart stop, then start.
# kill    SIGKILL: a crash, for outage tests. The next start recovers.
# status  prints whether it runs, where, the cluster id and the version.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_SRC="$INFRA_DIR/kafka"
KAFKA_POM="$KAFKA_SRC/pom.xml"
KAFKA_DIR="$LOCAL_DIR/kafka"
KAFKA_LIBS="$KAFKA_DIR/libs"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_CONFIG_DIR="$KAFKA_DIR/config"
KAFKA_CONFIG="$KAFKA_CONFIG_DIR/server.properties"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_CLUSTER_ID_FILE="$KAFKA_DIR/cluster-id"
KAFKA_PING="$LOCAL_DIR/bin/kafkaping"
KAFKA_START_TIMEOUT=120
KAFKA_BROKERS="$KAFKA_HOST:$KAFKA_PORT"
KAFKA_STALE=0

# The one place the version is set is the pom.
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM" | head -n 1)"
[[ -n "$KAFKA_VERSION" ]] || die "no <kafka.version> in $KAFKA_POM"

KAFKA_JAVA_OPTS=(
	-Xms512m -Xmx1g
	-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
	-XX:+ExitOnOutOfMemoryError
	-Djava.awt.headless=true
	"-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2.xml"
)

apt_install() {
	local what="$1"
	shift
	if [[ $EUID -ne 0 ]]; then
		die "$what is missing; install it: sudo apt-get install -y $*"
	fi
	info "installing $what from Debian's packages (apt-get install $*) ..."
	local apt_log="$LOG_DIR/apt-$1.log"
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; } \
		>"$apt_log" 2>&1 </dev/null; then
		die_with_log "apt-get install $* failed" "$apt_log"
	fi
}

java_major() {
	java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}

# Kafka 4's broker needs Java 17 or newer; Maven fetches the jars.
kafka_tools() {
	if ! command -v java >/dev/null 2>&1; then
		apt_install "Java 17" openjdk-17-jre-headless
	fi
	local major
	major="$(java_major)"
	if [[ -z "$major" || "$major" -lt 17 ]]; then
		die "Kafka $KAFKA_VERSION needs Java 17 or newer, found $(java -version 2>&1 | head -n 1) ($(command -v java))"
	fi
}

# Jars are cached: .local/kafka/libs/.stamp records the pom they were fetched for.
kafka_libs() {
	local stamp want
	want="kafka=$KAFKA_VERSION pom=$(sha256sum "$KAFKA_POM" | cut -c1-16)"
	stamp="$KAFKA_LIBS/.stamp"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		return
	fi
	command -v mvn >/dev/null 2>&1 || apt_install Maven maven
	local mvn_log="$LOG_DIR/mvn-kafka.log" t0
	t0="$(now)"
	info "fetching Kafka $KAFKA_VERSION jars from Maven Central (log $mvn_log) ..."
	rm -rf "$KAFKA_LIBS.tmp"
	if ! mvn -B -q -f "$KAFKA_POM" dependency:copy-dependencies \
		-DoutputDirectory="$KAFKA_LIBS.tmp" >"$mvn_log" 2>&1 </dev/null 9>&-; then
		die_with_log "mvn could not fetch the Kafka jars" "$mvn_log"
	fi
	[[ -f "$KAFKA_LIBS.tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] ||
		die_with_log "mvn finished but kafka_2.13-$KAFKA_VERSION.jar is not in $KAFKA_LIBS.tmp" "$mvn_log"
	printf '%s\n' "$want" >"$KAFKA_LIBS.tmp/.stamp"
	rm -rf "$KAFKA_LIBS"
	mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
	info "fetched $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars in $(elapsed "$t0")"
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
	local tmp
	tmp="$(mktemp)"
	sed -e "s|@HOST@|$KAFKA_HOST|g" \
		-e "s|@PORT@|$KAFKA_PORT|g" \
		-e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
		-e "s|@DATA_DIR@|$KAFKA_DATA|g" \
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

# Format once; the cluster id is kept in .local/kafka/cluster-id (and in meta.properties).
kafka_format() {
	if [[ -f "$KAFKA_DATA/meta.properties" ]]; then
		if [[ ! -f "$KAFKA_CLUSTER_ID_FILE" ]]; then
			sed -n 's/^cluster.id=//p' "$KAFKA_DATA/meta.properties" >"$KAFKA_CLUSTER_ID_FILE"
		fi
		return
	fi
	local id
	id="$(kafka_random_uuid)"
	info "formatting Kafka storage in $KAFKA_DATA (cluster id $id)"
	if ! java -cp "$KAFKA_LIBS/*" "-Dlog4j2.configurationFile=$KAFKA_SRC/log4j2.xml" \
		kafka.tools.StorageTool format --standalone --cluster-id "$id" --config "$KAFKA_CONFIG" \
		>>"$KAFKA_LOG" 2>&1 </dev/null 9>&-; then
		die_with_log "kafka.tools.StorageTool format failed" "$KAFKA_LOG"
	fi
	printf '%s\n' "$id" >"$KAFKA_CLUSTER_ID_FILE"
}

# kafka_find sets KAFKA_RUNNING_PID to the pid of this checkout's broker, or fails. A pid
# file whose process is gone, or is some other program now, is stale: removed, and
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
	# find the JVM started with this checkout's config file.
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

kafka_ping() {
	"$KAFKA_PING" -brokers "$KAFKA_BROKERS" "$@" 9>&-
}

kafka_start() {
	local t0
	t0="$(now)"
	with_lock kafka
	mkdir -p "$KAFKA_DIR"
	KAFKA_STALE=0
	kafka_ping_binary
	kafka_render_config

	local pid
	if kafka_find; then
		pid="$KAFKA_RUNNING_PID"
		local desc
		if ! desc="$(kafka_ping -wait 60s 2>&1)"; then
			die_with_log "Kafka runs (pid $pid) but does not answer on $KAFKA_BROKERS: $desc" "$KAFKA_LOG"
		fi
		if ((KAFKA_CONFIG_CHANGED)); then
			warn "server.properties changed; restart Kafka to apply it: bash infra/local/kafka.sh restart"
		fi
		info "kafka already running on $KAFKA_BROKERS (pid $pid)"
		return
	fi
	if ((KAFKA_STALE)); then
		info "removed a stale pid file (the broker had crashed or was killed)"
	fi

	local port
	for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
		if port_open "$KAFKA_HOST" "$port"; then
			die "port $KAFKA_HOST:$port is taken by another program, not this project's Kafka: $(ss -Hltnp "sport = :$port" 2>/dev/null | awk '{print $NF}' | head -n 1). Stop it, then re-run."
		fi
	done

	kafka_tools
	kafka_libs
	kafka_format

	info "starting kafka $KAFKA_VERSION on $KAFKA_BROKERS (data $KAFKA_DATA, log $KAFKA_LOG)"
	printf '\n==== %s start ====\n' "$(date -u +%FT%TZ)" >>"$KAFKA_LOG"
	# setsid: the broker must outlive the shell (and test process) that started it, and not
	# receive its terminal's signals. In a script the subshell is no group leader, so setsid
	# execs in place and $! is the JVM's pid.
	(
		cd "$KAFKA_DIR"
		close_inherited_fds
		exec setsid java "${KAFKA_JAVA_OPTS[@]}" -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_CONFIG"
	) >>"$KAFKA_LOG" 2>&1 </dev/null &
	pid=$!
	printf '%s\n' "$pid" >"$KAFKA_PID"

	local deadline=$((SECONDS + KAFKA_START_TIMEOUT)) desc=""
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$KAFKA_PID"
			die_with_log "Kafka exited during start-up" "$KAFKA_LOG"
		fi
		if port_open "$KAFKA_HOST" "$KAFKA_PORT" && desc="$(kafka_ping 2>&1)"; then
			break
		fi
		if ((SECONDS >= deadline)); then
			die_with_log "Kafka did not answer on $KAFKA_BROKERS within ${KAFKA_START_TIMEOUT}s (pid $pid still running; last probe: ${desc:-port closed})" "$KAFKA_LOG"
		fi
		sleep 0.3
	done
	info "kafka ready on $KAFKA_BROKERS in $(elapsed "$t0") ($desc)"
}

kafka_wait_exit() {
	local pid="$1" secs="$2"
	local deadline=$((SECONDS + secs))
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

kafka_stop() {
	with_lock kafka
	local pid
	if ! kafka_find; then
		info "kafka is not running"
		return
	fi
	pid="$KAFKA_RUNNING_PID"
	info "stopping kafka (SIGTERM, controlled shutdown) ..."
	kill -TERM "$pid" 2>/dev/null || true
	if ! kafka_wait_exit "$pid" 60; then
		warn "kafka did not stop within 60s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		kafka_wait_exit "$pid" 30 || die "kafka (pid $pid) survived SIGKILL for 30s"
	fi
	rm -f "$KAFKA_PID"
	info "kafka stopped"
}

kafka_kill() {
	with_lock kafka
	local pid
	if ! kafka_find; then
		info "kafka is not running"
		return
	fi
	pid="$KAFKA_RUNNING_PID"
	info "killing kafka (SIGKILL to pid $pid)"
	kill -KILL "$pid" 2>/dev/null || true
	kafka_wait_exit "$pid" 30 || die "kafka (pid $pid) survived SIGKILL for 30s"
	info "kafka killed (pid file left behind, as after a crash)"
}

kafka_status() {
	local pid id=""
	[[ -f "$KAFKA_CLUSTER_ID_FILE" ]] && id="$(cat "$KAFKA_CLUSTER_ID_FILE")"
	if kafka_find readonly; then
		pid="$KAFKA_RUNNING_PID"
		if [[ -x "$KAFKA_PING" ]] && kafka_ping >/dev/null 2>&1; then
			printf 'kafka     running  pid %s  %s (controller %s:%s)  version %s  cluster %s\n' \
				"$pid" "$KAFKA_BROKERS" "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT" "$KAFKA_VERSION" "${id:-?}"
			printf '          data %s  log %s\n' "$KAFKA_DATA" "$KAFKA_LOG"
			return 0
		fi
		printf 'kafka     starting or not answering  pid %s  log %s\n' "$pid" "$KAFKA_LOG"
		return 1
	fi
	local how=stopped
	((KAFKA_STALE)) && how="stopped (crashed: stale pid file)"
	printf 'kafka     %s  data %s  log %s\n' "$how" "$KAFKA_DATA" "$KAFKA_LOG"
	return 1
}

case "${1:-}" in
start) kafka_start ;;
stop) kafka_stop ;;
restart)
	kafka_stop
	exec 9>&-
	kafka_start
	;;
kill) kafka_kill ;;
status) kafka_status ;;
*)
	echo "usage: $0 start|stop|restart|kill|status" >&2
	exit 2
	;;
esac
