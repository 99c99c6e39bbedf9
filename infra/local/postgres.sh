#!/usr/bin/env bash
# Private PostgreSQL cluster for local development and tests.
#
#   bash infra/local/postgres.sh start|stop|restart|kill|status
#
# start   installs Debian's postgresql if absent, initialises the cluster once, writes the
#         settings, starts the server on 127.0.0.1:55432 and creates database "notify";
#         a no-op when it already runs. Returns only when the server accepts connections.
# stop    fast shutdown (rolls back open transactions, checkpoints), waits for it.
# restart stop, then start (applies settings that need a restart).
# kill    SIGKILL to the postmaster and its backends: a crash, for recovery tests.
# status  prints whether it runs, where, and the connection URL.
#
# The cluster is private: it is not one of Debian's pg_ctlcluster clusters, and it listens
# only on loopback with trust authentication. Never expose it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_URL="postgres://postgres@$PG_HOST:$PG_PORT/notify?sslmode=disable"
PG_FALLBACK_BASE=/var/lib/notify-local

# Postgres refuses to run as root. As root (CI, this machine) every server-side command runs
# as the postgres system user; as anyone else it runs as that user.
pg_as() {
	if [[ $EUID -eq 0 ]]; then
		setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
	else
		"$@"
	fi
}

pg_install() {
	if compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		return
	fi
	if [[ $EUID -ne 0 ]]; then
		die "PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin/postgres); install them: sudo apt-get install -y postgresql"
	fi
	info "installing PostgreSQL from Debian's packages (apt-get install postgresql) ..."
	local apt_log="$LOG_DIR/apt-postgresql.log"
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; } \
		>"$apt_log" 2>&1 </dev/null; then
		die_with_log "apt-get install postgresql failed" "$apt_log"
	fi
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null ||
		die "apt-get installed postgresql but /usr/lib/postgresql/*/bin/postgres is still missing"
}

# The data dir must be reachable by the postgres user. When the repository sits below a
# directory that user cannot traverse (a home dir with mode 700, say), the cluster goes to
# /var/lib/notify-local/<hash of the repo path>/pg/data instead; .local/pg/LOCATION says where.
pg_choose_data_dir() {
	local local_pg="$LOCAL_DIR/pg"
	local hash
	hash="$(printf '%s' "$NOTIFY_ROOT" | sha256sum | cut -c1-16)"
	local fallback="$PG_FALLBACK_BASE/$hash/pg/data"
	mkdir -p "$local_pg"
	if [[ -f "$local_pg/data/PG_VERSION" ]]; then
		PG_DATA="$local_pg/data"
	elif [[ -f "$fallback/PG_VERSION" ]]; then
		PG_DATA="$fallback"
	elif [[ $EUID -ne 0 ]]; then
		PG_DATA="$local_pg/data"
	else
		chown postgres:postgres "$local_pg"
		chmod 700 "$local_pg"
		if pg_as test -w "$local_pg"; then
			PG_DATA="$local_pg/data"
		else
			warn "user postgres cannot reach $local_pg (a parent directory is not traversable); using $fallback"
			mkdir -p "$(dirname "$fallback")"
			chown postgres:postgres "$(dirname "$fallback")"
			PG_DATA="$fallback"
		fi
	fi
	printf '%s\n' "$PG_DATA" >"$local_pg/LOCATION"
}

# Binaries matching the cluster's major version; for a new cluster the newest installed.
pg_choose_bin() {
	local version=""
	if [[ -f "$PG_DATA/PG_VERSION" ]]; then
		version="$(cat "$PG_DATA/PG_VERSION")"
		PG_BIN="/usr/lib/postgresql/$version/bin"
		[[ -x "$PG_BIN/postgres" ]] ||
			die "the cluster in $PG_DATA is PostgreSQL $version but $PG_BIN/postgres is missing (install postgresql-$version, or run infra/local/reset.sh to start over)"
	else
		PG_BIN="$(dirname "$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)")"
	fi
}

pg_setup_paths() {
	ensure_local_dirs
	pg_choose_data_dir
	if compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		pg_choose_bin
	else
		PG_BIN=""
	fi
}

# Unix socket next to the data (not /var/run/postgresql, which Debian's own clusters use),
# unless the path would exceed the 107-byte socket path limit; then TCP only.
pg_socket_dir() {
	if ((${#PG_DATA} + 20 < 100)); then
		printf '%s' "$PG_DATA"
	fi
}

pg_initdb() {
	[[ -f "$PG_DATA/PG_VERSION" ]] && return
	info "initialising a new cluster in $PG_DATA ($("$PG_BIN/postgres" --version))"
	mkdir -p "$PG_DATA"
	if [[ $EUID -eq 0 ]]; then
		chown postgres:postgres "$PG_DATA"
	fi
	chmod 700 "$PG_DATA"
	if ! pg_as "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C \
		>>"$PG_LOG" 2>&1 </dev/null 9>&-; then
		die_with_log "initdb failed for $PG_DATA" "$PG_LOG"
	fi
}

# Settings live in notify-local.conf, included from postgresql.conf and rewritten on every
# start, so changing them here and re-running up.sh updates the cluster.
pg_write_config() {
	local conf="$PG_DATA/notify-local.conf"
	local tmp
	tmp="$(mktemp)"
	cat >"$tmp" <<EOF
# Written by infra/local/postgres.sh on every start; edit the script, not this file.
listen_addresses = '$PG_HOST'
port = $PG_PORT
unix_socket_directories = '$(pg_socket_dir)'

# Logical decoding for the CDC connector; every test database creates its own slot.
wal_level = logical
max_replication_slots = 64
max_wal_senders = 64
wal_sender_timeout = 60s
max_slot_wal_keep_size = 10GB

# Parallel test packages each hold pools of connections.
max_connections = 400

# Sized for bulk-loading and fanning out 1M rows.
shared_buffers = 1GB
work_mem = 64MB
maintenance_work_mem = 512MB
max_wal_size = 8GB
checkpoint_timeout = 15min
# Full-page images after each checkpoint, compressed with lz4: the default
# (pglz) took 14% of the backends' CPU in a 1M run with checkpoints, and an
# UPDATE of 40k rows spread over pages after a CHECKPOINT cost 945-1029 ms
# with pglz, 260-265 ms with lz4 and 297-371 ms uncompressed; WAL 35, 37
# and 57 MB (benchmarks/RESULTS.md).
wal_compression = lz4

# Durability is part of the contract: a committed outbox row survives a crash.
fsync = on
synchronous_commit = on
full_page_writes = on

timezone = 'UTC'
log_timezone = 'UTC'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
	local changed=0
	if ! cmp -s "$tmp" "$conf"; then
		changed=1
		install -m 0644 "$tmp" "$conf"
		if [[ $EUID -eq 0 ]]; then chown postgres:postgres "$conf"; fi
	fi
	rm -f "$tmp"

	if ! grep -q "^include_if_exists = 'notify-local.conf'" "$PG_DATA/postgresql.conf"; then
		printf "\n# Settings of the notify project's local cluster.\ninclude_if_exists = 'notify-local.conf'\n" \
			>>"$PG_DATA/postgresql.conf"
		changed=1
	fi

	local hba="$PG_DATA/pg_hba.conf"
	tmp="$(mktemp)"
	cat >"$tmp" <<EOF
# Written by infra/local/postgres.sh: loopback only, no passwords (local development).
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   trust
host    replication  all   127.0.0.1/32   trust
EOF
	if ! cmp -s "$tmp" "$hba"; then
		changed=1
		install -m 0600 "$tmp" "$hba"
		if [[ $EUID -eq 0 ]]; then chown postgres:postgres "$hba"; fi
	fi
	rm -f "$tmp"
	PG_CONFIG_CHANGED=$changed
}

# pg_cluster_pids lists the processes of this cluster: every postgres process works in its
# data directory. After a crash of the postmaster this finds orphaned backends too.
pg_cluster_pids() {
	local p out=""
	for p in /proc/[0-9]*; do
		if [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$PG_DATA" ]]; then
			out+="${p#/proc/} "
		fi
	done
	printf '%s' "$out"
}

# pg_wait_orphans waits for processes left by a crashed postmaster: they notice its death
# and exit, and until they do they keep the old shared memory and may hold the port.
pg_wait_orphans() {
	local deadline=$((SECONDS + 30)) pids
	while pids="$(pg_cluster_pids)" && [[ -n "$pids" ]]; do
		if ((SECONDS >= deadline)); then
			die "processes of a crashed postgres are still running after 30s (pids $pids); stop them, then re-run"
		fi
		sleep 0.1
	done
}

pg_running() {
	[[ -n "${PG_BIN:-}" && -f "$PG_DATA/postmaster.pid" ]] || return 1
	pg_as "$PG_BIN/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1 </dev/null 9>&-
}

pg_ready() {
	"$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -t 2 </dev/null
}

pg_psql() {
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U postgres "$@" </dev/null
}

pg_ensure_database() {
	local exists
	exists="$(pg_psql -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'notify'")" ||
		die_with_log "cannot query the server on $PG_HOST:$PG_PORT" "$PG_LOG"
	if [[ "$exists" != 1 ]]; then
		pg_psql -d postgres -c 'CREATE DATABASE notify' >/dev/null ||
			die_with_log "CREATE DATABASE notify failed" "$PG_LOG"
		info "created database notify"
	fi
}

pg_warn_pending_restart() {
	local pending
	pending="$(pg_psql -d postgres -tAc "SELECT string_agg(name, ', ') FROM pg_settings WHERE pending_restart")" || return 0
	if [[ -n "$pending" ]]; then
		warn "changed settings need a restart to apply ($pending): bash infra/local/postgres.sh restart"
	fi
}

pg_wait_ready() {
	local deadline=$((SECONDS + ${1:-60}))
	until pg_ready; do
		if ((SECONDS >= deadline)); then
			die_with_log "PostgreSQL did not accept connections on $PG_HOST:$PG_PORT within ${1:-60}s" "$PG_LOG"
		fi
		sleep 0.2
	done
}

pg_start() {
	local t0
	t0="$(now)"
	with_lock postgres
	pg_install
	pg_setup_paths
	pg_initdb
	pg_write_config

	if pg_running; then
		pg_wait_ready 60
		if ((PG_CONFIG_CHANGED)); then
			pg_as "$PG_BIN/pg_ctl" reload -D "$PG_DATA" -s >/dev/null 2>&1 </dev/null 9>&- || true
			sleep 0.5
			pg_warn_pending_restart
		fi
		pg_ensure_database
		info "postgres already running on $PG_HOST:$PG_PORT (pid $(head -n 1 "$PG_DATA/postmaster.pid"))"
		return
	fi

	pg_wait_orphans
	reserve_port "$PG_PORT"
	if port_open "$PG_HOST" "$PG_PORT"; then
		die "port $PG_HOST:$PG_PORT is taken by another program, not this project's cluster ($PG_DATA): $(ss -Hltnp "sport = :$PG_PORT" 2>/dev/null | awk '{print $NF}' | head -n 1). Stop it, then re-run."
	fi

	# A postmaster.pid left by a crash is handled by the server itself (it checks the pid
	# and runs crash recovery from the WAL).
	info "starting postgres on $PG_HOST:$PG_PORT (data $PG_DATA, log $PG_LOG)"
	printf '\n==== %s start ====\n' "$(date -u +%FT%TZ)" >>"$PG_LOG"
	# Without -l the server writes to pg_ctl's stdout: the log file opened here by the caller,
	# so the postgres user needs no write access to .local/log.
	local attempt
	for attempt in 1 2 3 4; do
		if (
			close_inherited_fds
			pg_as "$PG_BIN/pg_ctl" start -D "$PG_DATA" -w -t 120 -s
		) >>"$PG_LOG" 2>&1 </dev/null; then
			break
		fi
		# A bind failure with nothing listening means some socket sits on the port, most likely
		# a client's ephemeral port when 55432 could not be reserved (see reserve_port; seen
		# once under heavy load). Those go away: retry a few times, and nothing else.
		if ((attempt < 4)) && tail -n 5 "$PG_LOG" | grep -q 'could not create any TCP/IP sockets'; then
			warn "port $PG_PORT not bindable yet; retrying in 2s"
			sleep 2
			continue
		fi
		if tail -n 5 "$PG_LOG" | grep -q 'could not create any TCP/IP sockets'; then
			die_with_log "PostgreSQL could not bind $PG_HOST:$PG_PORT: a socket holds the port without listening (see: ss -tanp | grep :$PG_PORT)" "$PG_LOG"
		fi
		die_with_log "PostgreSQL failed to start" "$PG_LOG"
	done
	pg_wait_ready 60
	pg_ensure_database
	info "postgres ready on $PG_HOST:$PG_PORT in $(elapsed "$t0"): $PG_URL"
}

pg_stop() {
	with_lock postgres
	pg_setup_paths
	if ! pg_running; then
		info "postgres is not running"
		return
	fi
	info "stopping postgres (fast shutdown) ..."
	if ! pg_as "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 60 -s >>"$PG_LOG" 2>&1 </dev/null 9>&-; then
		warn "fast shutdown did not finish in 60s; forcing an immediate shutdown"
		pg_as "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m immediate -w -t 30 -s >>"$PG_LOG" 2>&1 </dev/null 9>&- ||
			die_with_log "PostgreSQL did not stop" "$PG_LOG"
	fi
	info "postgres stopped"
}

pg_kill() {
	with_lock postgres
	pg_setup_paths
	if ! pg_running; then
		info "postgres is not running"
		return
	fi
	local pid
	pid="$(head -n 1 "$PG_DATA/postmaster.pid")"
	# Every server process runs in its own session, so a process-group kill would miss the
	# backends; kill the postmaster and everything running in the cluster's directory at once,
	# like a power cut would, and repeat for a child forked meanwhile.
	info "killing postgres (SIGKILL to postmaster $pid and every process of the cluster)"
	kill -KILL "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 30)) pids
	while :; do
		pids="$(pg_cluster_pids)"
		kill -0 "$pid" 2>/dev/null && pids="$pid $pids"
		[[ -n "${pids// /}" ]] || break
		((SECONDS < deadline)) || die "postgres processes survived SIGKILL for 30s: $pids"
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		sleep 0.05
	done
	info "postgres killed (postmaster.pid left behind, as after a crash)"
}

pg_status() {
	pg_setup_paths
	if [[ -z "${PG_BIN:-}" ]]; then
		echo "postgres  not installed"
		return 1
	fi
	if pg_running && pg_ready; then
		printf 'postgres  running  pid %s  %s:%s  %s\n' "$(head -n 1 "$PG_DATA/postmaster.pid")" "$PG_HOST" "$PG_PORT" "$PG_URL"
		printf '          data %s  log %s\n' "$PG_DATA" "$PG_LOG"
		return 0
	elif pg_running; then
		printf 'postgres  starting or not answering  data %s  log %s\n' "$PG_DATA" "$PG_LOG"
		return 1
	fi
	printf 'postgres  stopped  data %s  log %s\n' "$PG_DATA" "$PG_LOG"
	return 1
}

case "${1:-}" in
start) pg_start ;;
stop) pg_stop ;;
restart)
	pg_stop
	exec 9>&-
	pg_start
	;;
kill) pg_kill ;;
status) pg_status ;;
*)
	echo "usage: $0 start|stop|restart|kill|status" >&2
	exit 2
	;;
esac
