#!/usr/bin/env bash
# The demo, from a clean clone: starts (or reuses) local Postgres and Kafka,
# builds notify, and runs `notify demo` — seed, every service as its own
# process, one publish, live progress, a summary table. Ctrl-C stops it all.
# Arguments go to notify demo, e.g. --users 1000000.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$NOTIFY_ROOT"

bash "$INFRA_DIR/up.sh" postgres
if ! bash "$INFRA_DIR/up.sh" kafka; then
	warn "Apache Kafka could not start (see $KAFKA_LOG); notify demo will fall back to an in-process Kafka-protocol broker and say so"
fi
mkdir -p "$LOCAL_DIR/bin"
info "building notify"
go build -o "$LOCAL_DIR/bin/notify" ./services/notify
# The demo uses the servers started above, whatever the caller's environment says: with the
# port overrides (a second checkout beside a running one) notify's defaults would point it
# at the other checkout's servers, and the URL it prints for `notify status` with them.
# (--database-url / --kafka-brokers still win: flags override the environment.)
export NOTIFY_DATABASE_URL="postgres://postgres@$PG_HOST:$PG_PORT/notify?sslmode=disable"
export NOTIFY_KAFKA_BROKERS="$KAFKA_HOST:$KAFKA_PORT"
# Dev mode: the demo runs on the public dev secrets against the local mock, all on loopback.
export NOTIFY_DEV=1
exec "$LOCAL_DIR/bin/notify" demo "$@"
