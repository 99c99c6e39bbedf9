#!/usr/bin/env bash
# The test suite, from a clean clone on a fresh machine: installs what the
# tests need, starts the real Postgres and Kafka (infra/local/up.sh), then
#   1. go vet ./... and staticcheck ./...
#   2. the disruptive tests (they stop and restart the shared broker or
#      Postgres), alone, one package at a time;
#   3. every package's tests with the race detector, packages in parallel,
#      each test in its own database and topic prefix (crash tests kill -9
#      real notify processes here).
# Extra arguments go to both go test runs, e.g. -run TestSeed or -v.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$NOTIFY_ROOT"

# The tests use the servers this script starts, whatever the caller's
# environment says: with the port overrides (a second checkout beside a
# running one) the defaults would silently point the tests at the other
# checkout's servers — and the disruptive tests would stop this checkout's.
export NOTIFY_TEST_DATABASE_URL="postgres://postgres@$PG_HOST:$PG_PORT/notify?sslmode=disable"
export NOTIFY_TEST_KAFKA_BROKERS="$KAFKA_HOST:$KAFKA_PORT"
export NOTIFY_DATABASE_URL="$NOTIFY_TEST_DATABASE_URL" NOTIFY_KAFKA_BROKERS="$NOTIFY_TEST_KAFKA_BROKERS"

t0="$(now)"
# The log directory first: on a fresh clone nothing has created it yet, and
# the kcat install below writes its log there (a failed redirect would skip
# the install, and with it the contract test that needs kcat).
ensure_local_dirs
# kcat is a Kafka client that is not ours: the connector tests read its
# records with it to prove other teams' consumers can.
if ! command -v kcat >/dev/null 2>&1; then
	if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		info "installing kcat (Debian package) for the connector contract test"
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } >"$LOG_DIR/apt-kcat.log" 2>&1 ||
			warn "could not install kcat (see $LOG_DIR/apt-kcat.log); the test that needs it will fail"
	else
		warn "kcat is not installed and cannot be installed here (needs root + apt-get); with CI set the connector's kcat test fails"
	fi
fi

# Firefox ESR (Debian's package) is the real browser of the web app's test
# (services/api/webapp): it subscribes through the API and decrypts the
# pipeline's pushes itself.
if ! command -v firefox-esr >/dev/null 2>&1 && ! command -v firefox >/dev/null 2>&1; then
	if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		info "installing firefox-esr (Debian package) for the real-browser test"
		mkdir -p "$LOG_DIR"
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq firefox-esr; } >"$LOG_DIR/apt-firefox.log" 2>&1 ||
			warn "could not install firefox-esr (see $LOG_DIR/apt-firefox.log); the real-browser test will fail"
	else
		warn "Firefox is not installed and cannot be installed here (needs root + apt-get)"
	fi
fi

# Prometheus (Debian's package: prometheus and promtool) checks infra/prometheus and the
# Grafana dashboard against real scrapes (infra/prometheus). The test starts its own server
# on a free port; the package's service is stopped so nothing else holds port 9090.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		info "installing prometheus (Debian package) for the alerts and dashboard test"
		mkdir -p "$LOG_DIR"
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } >"$LOG_DIR/apt-prometheus.log" 2>&1 ||
			warn "could not install prometheus (see $LOG_DIR/apt-prometheus.log); the alerts and dashboard test will fail"
		if [[ -d /run/systemd/system ]]; then
			systemctl disable --now prometheus >>"$LOG_DIR/apt-prometheus.log" 2>&1 || true
		elif [[ -x /etc/init.d/prometheus ]]; then
			/etc/init.d/prometheus stop >>"$LOG_DIR/apt-prometheus.log" 2>&1 || true
		fi
	else
		warn "Prometheus is not installed and cannot be installed here (needs root + apt-get)"
	fi
fi

bash "$INFRA_DIR/up.sh"

# Debezium's PostgreSQL connector on a Kafka Connect worker (jars from Maven Central, fetched
# once): the roster tests capture real change events with it (infra/local/debeziumtest).
# After up.sh, so its mvn run does not share the Maven cache with the broker's first fetch.
# A failed fetch does not stop the suite: with CI set the tests that need the jars fail,
# naming them.
bash "$INFRA_DIR/debezium.sh" fetch ||
	warn "could not fetch the Debezium jars (see above); the tests that capture change events will fail"

info "go vet ./..."
go vet ./...

# staticcheck is pinned as a tool in go.mod (go get -tool), so every machine
# runs the same version; staticcheck.conf says which checks and why.
info "staticcheck ./..."
go tool staticcheck ./...

# Disruptive tests stop and restart the shared broker or Postgres, so they
# run first, alone, one package at a time: only packages that have them.
mapfile -t disruptive < <(grep -rl --include='*_test.go' --exclude-dir=.local --exclude-dir=.git '^func TestDisruptive' . | xargs -r -n1 dirname | sort -u)
if ((${#disruptive[@]} > 0)); then
	info "disruptive tests (stop/restart the shared servers): ${disruptive[*]}"
	NOTIFY_DISRUPTIVE_TESTS=1 go test -count=1 -p 1 -timeout 20m -run 'Disruptive' "$@" "${disruptive[@]}"
	# They leave the servers running; make sure, before the main run.
	bash "$INFRA_DIR/up.sh"
fi

info "go test -race ./... (real Postgres + Kafka)"
go test -race -count=1 -timeout 20m "$@" ./...

info "all tests passed in $(elapsed "$t0")"
