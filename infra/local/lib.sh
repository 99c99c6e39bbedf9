# Shared shell for the local infrastructure scripts (sourced, not run).
#
# Everything the scripts create lives under <repo>/.local (ignored by git):
#   .local/pg/data                Postgres cluster (or elsewhere: postgres.sh, pg_choose_data_dir)
#   .local/kafka/{libs,data,config}  Kafka jars (cache), log segments, generated config
#   .local/log/{postgres,kafka}.log  server logs
# The scripts resolve the repository from their own path, so they work from any cwd.

# The variables below are used by the scripts that source this file.
# shellcheck disable=SC2034
set -euo pipefail

NOTIFY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
LOCAL_DIR="$NOTIFY_ROOT/.local"
LOG_DIR="$LOCAL_DIR/log"
INFRA_DIR="$NOTIFY_ROOT/infra/local"

# The ports are fixed: NOTIFY_DATABASE_URL and NOTIFY_KAFKA_BROKERS default to them. The
# overrides exist to try the scripts in a second checkout beside a running one.
PG_PORT="${NOTIFY_LOCAL_PG_PORT:-55432}"
PG_HOST=127.0.0.1
PG_LOG="$LOG_DIR/postgres.log"

KAFKA_PORT="${NOTIFY_LOCAL_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${NOTIFY_LOCAL_KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_HOST=127.0.0.1
KAFKA_LOG="$LOG_DIR/kafka.log"

SCRIPT_NAME="$(basename "${0:-lib.sh}" .sh)"

info() { printf '%s: %s\n' "$SCRIPT_NAME" "$*"; }
warn() { printf '%s: warning: %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$SCRIPT_NAME" "$*" >&2
	exit 1
}

# die_with_log MESSAGE LOGFILE: fail, naming the log and showing its tail.
die_with_log() {
	local msg="$1" log="$2"
	{
		printf '%s: error: %s\n' "$SCRIPT_NAME" "$msg"
		if [[ -s "$log" ]]; then
			printf '%s: last lines of %s:\n' "$SCRIPT_NAME" "$log"
			tail -n 30 "$log" | sed 's/^/    /'
		fi
		printf '%s: full log: %s\n' "$SCRIPT_NAME" "$log"
	} >&2
	exit 1
}

ensure_local_dirs() {
	mkdir -p "$LOCAL_DIR" "$LOG_DIR"
}

# with_lock NAME: serialise concurrent runs (parallel test packages may all call up.sh).
# The lock is fd 9; every server is started with 9>&- so it does not inherit it.
with_lock() {
	ensure_local_dirs
	exec 9>"$LOCAL_DIR/$1.lock"
	if ! flock -w 300 9; then
		die "another run holds $LOCAL_DIR/$1.lock for more than 5 minutes"
	fi
}

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# elapsed_since START_SECONDS (from $SECONDS-like epoch via date +%s.%N).
now() { date +%s.%N; }
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1fs", e - s }'; }

# pid_alive PIDFILE: true when the file names a live process.
pid_alive() {
	local pid
	[[ -s "$1" ]] || return 1
	pid="$(head -n 1 "$1")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null
}

# close_inherited_fds closes every descriptor above stderr in the current (sub)shell. Servers
# are started from a subshell that calls it first, so they hold no pipe or lock of whoever ran
# the script (a test harness waiting for its pipe to close would otherwise hang).
close_inherited_fds() {
	local fd
	for fd in "/proc/$BASHPID/fd/"*; do
		fd="${fd##*/}"
		if [[ "$fd" =~ ^[0-9]+$ ]] && ((fd > 2)); then
			eval "exec $fd>&-" 2>/dev/null || true
		fi
	done
}

# reserve_port PORT keeps the kernel from handing PORT out as the local port of an outgoing
# connection. 55432 lies inside Linux's default ephemeral range (32768-60999): on a busy
# machine a client socket can sit on it and the server's bind fails with "Address already in
# use" although nothing listens. Needs root; otherwise only the retry in postgres.sh helps.
reserve_port() {
	local port="$1" f=/proc/sys/net/ipv4/ip_local_reserved_ports lo hi current
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
	((port >= lo && port <= hi)) || return 0
	[[ $EUID -eq 0 && -w "$f" ]] || return 0
	current="$(cat "$f" 2>/dev/null)" || return 0
	if awk -v p="$port" -F, '{ for (i = 1; i <= NF; i++) { n = split($i, r, "-"); if ((n == 1 && r[1] == p) || (n == 2 && p >= r[1] && p <= r[2])) found = 1 } } END { exit !found }' <<<"$current"; then
		return 0
	fi
	printf '%s\n' "${current:+$current,}$port" >"$f" 2>/dev/null ||
		warn "could not reserve port $port in $f (ephemeral range $lo-$hi)"
}

# parse_brokers_flag ARG... takes --brokers N (or --brokers=N) out of the arguments, exporting
# it as NOTIFY_LOCAL_KAFKA_NODES for kafka.sh, and leaves the rest in the array "args".
parse_brokers_flag() {
	args=()
	while (($# > 0)); do
		case "$1" in
		--brokers)
			(($# >= 2)) || die "--brokers needs a node count, e.g. --brokers 3"
			export NOTIFY_LOCAL_KAFKA_NODES="$2"
			shift 2
			;;
		--brokers=*)
			export NOTIFY_LOCAL_KAFKA_NODES="${1#--brokers=}"
			shift
			;;
		*)
			args+=("$1")
			shift
			;;
		esac
	done
}

# select_services "DEFAULTS" ARG...: sets the array "services" to the
# services named on the command line (postgres | kafka), or to DEFAULTS (a
# space-separated list, in order) when none is named, and fails before
# anything is touched on an unknown name.
select_services() {
	local defaults="$1"
	shift
	services=("$@")
	if (($# == 0)); then
		read -r -a services <<<"$defaults"
	fi
	local s
	for s in "${services[@]}"; do
		case "$s" in
		postgres | kafka) ;;
		*) die "unknown service \"$s\" (want postgres or kafka)" ;;
		esac
	done
}

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

# require_java MAJOR WHAT: java on PATH (Debian's 17 installed when there is none) is at
# least MAJOR, or fail naming WHAT needs it.
require_java() {
	local want="$1" what="$2" major
	if ! command -v java >/dev/null 2>&1; then
		apt_install "Java 17" openjdk-17-jre-headless
	fi
	major="$(java_major)"
	if [[ -z "$major" || "$major" -lt "$want" ]]; then
		die "$what needs Java $want or newer, found $(java -version 2>&1 | head -n 1) ($(command -v java))"
	fi
}

# maven_libs POM DIR ID JAR WHAT LOG copies the dependencies POM lists into DIR with mvn
# (Maven Central, cached in ~/.m2), once: DIR/.stamp records ID and the pom's hash, and a
# changed pom fetches again. JAR is a file the copy must contain. The jars land in DIR.tmp
# first and replace DIR only when complete, so an interrupted fetch never leaves a
# classpath that half works.
maven_libs() {
	local pom="$1" dir="$2" id="$3" jar="$4" what="$5" mvn_log="$6" stamp want t0
	want="$id pom=$(sha256sum "$pom" | cut -c1-16)"
	stamp="$dir/.stamp"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		return
	fi
	command -v mvn >/dev/null 2>&1 || apt_install Maven maven
	t0="$(now)"
	info "fetching $what jars from Maven Central (log $mvn_log) ..."
	rm -rf "$dir.tmp"
	if ! mvn -B -q -f "$pom" dependency:copy-dependencies \
		-DoutputDirectory="$dir.tmp" >"$mvn_log" 2>&1 </dev/null 9>&-; then
		die_with_log "mvn could not fetch the $what jars" "$mvn_log"
	fi
	[[ -f "$dir.tmp/$jar" ]] ||
		die_with_log "mvn finished but $jar is not in $dir.tmp" "$mvn_log"
	printf '%s\n' "$want" >"$dir.tmp/.stamp"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	info "fetched $(find "$dir" -name '*.jar' | wc -l) jars in $(elapsed "$t0")"
}
