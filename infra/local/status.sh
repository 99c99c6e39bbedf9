#!/usr/bin/env bash
# Print what runs where. Exits non-zero when a server is not up.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rc=0
bash "$INFRA_DIR/postgres.sh" status || rc=1
bash "$INFRA_DIR/kafka.sh" status || rc=1
exit $rc
