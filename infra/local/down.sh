#!/usr/bin/env bash
# Stop the local infrastructure gracefully and wait until it has stopped. Data is kept.
#
#   bash infra/local/down.sh              # both
#   bash infra/local/down.sh kafka        # one (postgres | kafka)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

select_services "kafka postgres" "$@"
for s in "${services[@]}"; do
	bash "$INFRA_DIR/$s.sh" stop
done
