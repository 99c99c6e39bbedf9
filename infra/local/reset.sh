#!/usr/bin/env bash
# DESTRUCTIVE: stop the local servers and delete their data (every database, every topic),
# their generated config and their logs. Asks nothing. The downloaded Kafka jars and the
# built readiness probe are kept (they are caches, not data). The next up.sh starts from an
# empty cluster: initdb, storage format with a new cluster id, database "notify".
#
#   bash infra/local/reset.sh              # both
#   bash infra/local/reset.sh postgres     # one (postgres | kafka)
# Kafka: the layout last started (one node or a cluster, see kafka.sh), or --brokers N; the
# other layout's data is kept.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_brokers_flag "$@"
select_services "kafka postgres" "${args[@]}"

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
		nodes="${NOTIFY_LOCAL_KAFKA_NODES:-$(cat "$LOCAL_DIR/kafka/nodes" 2>/dev/null || echo 1)}"
		if [[ "$nodes" == 1 ]]; then
			rm -rf "$LOCAL_DIR/kafka/data" "$LOCAL_DIR/kafka/config" "$LOCAL_DIR/kafka/cluster-id" \
				"$LOCAL_DIR/kafka/kafka.pid" "$LOG_DIR/kafka.log"
			info "deleted the Kafka data (jars kept in $LOCAL_DIR/kafka/libs)"
		else
			rm -rf "$LOCAL_DIR/kafka/cluster" "$LOG_DIR"/kafka-[0-9].log
			# Later commands without NOTIFY_LOCAL_KAFKA_NODES mean the single node again.
			if [[ "$(cat "$LOCAL_DIR/kafka/nodes" 2>/dev/null)" == "$nodes" ]]; then
				rm -f "$LOCAL_DIR/kafka/nodes"
			fi
			info "deleted the data of the $nodes-node Kafka cluster (jars kept in $LOCAL_DIR/kafka/libs)"
		fi
		;;
	esac
done
