#!/usr/bin/env bash
# Stop the local infrastructure gracefully and wait until it has stopped. Data is kept.
#
#   bash infra/local/down.sh              # both
#   bash infra/local/down.sh kafka        # one (postgres | kafka)
# Kafka: every node of the layout last started (see kafka.sh), or --brokers N.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_brokers_flag "$@"
select_services "kafka postgres" "${args[@]}"
for s in "${services[@]}"; do
	bash "$INFRA_DIR/$s.sh" stop
done
