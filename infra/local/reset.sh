#!/usr/bin/env bash
# DESTRUCTIVE: stop the local servers and delete their data (every database, every topic),
# their generated config and their logs. Asks nothing. The downloaded Kafka jars and the
# built readiness probe are kept (they are caches, not data). The next up.sh starts from an
# empty cluster: initdb, storage format with a new cluster id, database "notify".
#
#   bash infra/local/reset.sh              # both
#   bash infra/local/reset.sh postgres     # one (postgres | kafka)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

select_services "kafka postgres" "$@"

for s in "${services[@]}"; do
	bash "$INFRA_DIR/$s.sh" stop
	case "$s" in
	postgres)
		# The cluster may live outside the repo (see postgres.sh, pg_choose_data_dir).
		if [[ -f "$LOCAL_DIR/pg/LOCATION" ]]; then
			data="$(cat "$LOCAL_DIR/pg/LOCATION")"
			if [[ "$data" == /var/lib/notify-local/*/pg/data ]]; then
				rm -rf "${data%/pg/data}"
			fi
		fi
		rm -rf "$LOCAL_DIR/pg" "$LOG_DIR/postgres.log"
		info "deleted the Postgres cluster"
		;;
	kafka)
		rm -rf "$LOCAL_DIR/kafka/data" "$LOCAL_DIR/kafka/config" "$LOCAL_DIR/kafka/cluster-id" \
			"$LOCAL_DIR/kafka/kafka.pid" "$LOG_DIR/kafka.log"
		info "deleted the Kafka data (jars kept in $LOCAL_DIR/kafka/libs)"
		;;
	esac
done
