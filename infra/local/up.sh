#!/usr/bin/env bash
# Start the local infrastructure: PostgreSQL on 127.0.0.1:55432 and Apache Kafka on
# 127.0.0.1:19092. Idempotent: what already runs is left alone ("already running"), what is
# stopped or crashed is (re)started. Returns when every server answers.
#
#   bash infra/local/up.sh              # both
#   bash infra/local/up.sh postgres     # one (postgres | kafka)
#   bash infra/local/up.sh --brokers 3 kafka   # a local Kafka cluster of 3 nodes (kafka.sh)
#
# --brokers N is NOTIFY_LOCAL_KAFKA_NODES=N: client ports 19092, 19094, 19096 (controllers
# 19093, 19095, 19097), or NOTIFY_LOCAL_KAFKA_PORT / _CONTROLLER_PORT + 2(N-1).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_brokers_flag "$@"
select_services "postgres kafka" "${args[@]}"

t0="$(now)"
# Both start at once: a first run spends most of its time fetching Kafka's jars, which
# overlaps with initdb. Every line is prefixed with the service that printed it.
declare -A pids
for s in "${services[@]}"; do
	bash "$INFRA_DIR/$s.sh" start &
	pids[$s]=$!
done
failed=()
for s in "${services[@]}"; do
	wait "${pids[$s]}" || failed+=("$s")
done
if ((${#failed[@]} > 0)); then
	die "could not start: ${failed[*]} (see the errors above and $LOG_DIR/)"
fi
info "up (${services[*]}) in $(elapsed "$t0")"
