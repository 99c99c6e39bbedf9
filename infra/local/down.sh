#!/usr/bin/env bash
# Stop the local infrastructure gracefully and wait until it has stopped. Data is kept.
#
#   bash infra/local/down.sh              # both
#   bash infra/local/down.sh kafka        # one (postgres | kafka)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

services=("$@")
if ((${#services[@]} == 0)); then
	services=(kafka postgres)
fi
for s in "${services[@]}"; do
	case "$s" in
	postgres | kafka) ;;
	*) die "unknown service \"$s\" (want postgres or kafka)" ;;
	esac
done
for s in "${services[@]}"; do
	bash "$INFRA_DIR/$s.sh" stop
done
