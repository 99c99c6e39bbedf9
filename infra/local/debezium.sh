#!/usr/bin/env bash
# Debezium's PostgreSQL connector on a Kafka Connect standalone worker, for the tests that
# need real change events from a course platform's database (infra/local/debeziumtest).
#
#   bash infra/local/debezium.sh fetch
#
# fetch  copies the worker's and the connector's jars from Maven Central with mvn into
#        .local/debezium/libs, once (again only when infra/local/debezium/pom.xml changes).
#        Idempotent; on failure it prints the tail of .local/log/mvn-debezium.log.
#
# Nothing runs here: each test starts its own worker (debeziumtest.Start) with its own
# config, REST port, offsets, replication slot and topic prefix, and stops it when it ends.
# The classpath is kept apart from the broker's (.local/kafka/libs): Debezium 3.6 needs the
# 4.3 Connect and client jars, the broker runs 4.4 (see the pom).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEBEZIUM_SRC="$INFRA_DIR/debezium"
DEBEZIUM_POM="$DEBEZIUM_SRC/pom.xml"
DEBEZIUM_LIBS="$LOCAL_DIR/debezium/libs"

pom_property() {
	sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$DEBEZIUM_POM" | head -n 1
}
DEBEZIUM_VERSION="$(pom_property debezium.version)"
CONNECT_VERSION="$(pom_property connect.version)"
[[ -n "$DEBEZIUM_VERSION" && -n "$CONNECT_VERSION" ]] ||
	die "no <debezium.version> or <connect.version> in $DEBEZIUM_POM"

debezium_fetch() {
	with_lock debezium
	mkdir -p "$LOCAL_DIR/debezium"
	require_java 17 "Kafka Connect $CONNECT_VERSION"
	maven_libs "$DEBEZIUM_POM" "$DEBEZIUM_LIBS" "debezium=$DEBEZIUM_VERSION connect=$CONNECT_VERSION" \
		"debezium-connector-postgres-$DEBEZIUM_VERSION.jar" \
		"Debezium $DEBEZIUM_VERSION and Kafka Connect $CONNECT_VERSION" "$LOG_DIR/mvn-debezium.log"
	[[ -f "$DEBEZIUM_LIBS/connect-runtime-$CONNECT_VERSION.jar" ]] ||
		die "$DEBEZIUM_LIBS has no connect-runtime-$CONNECT_VERSION.jar; delete the directory and fetch again"
	info "Debezium $DEBEZIUM_VERSION on Kafka Connect $CONNECT_VERSION: $DEBEZIUM_LIBS ($(find "$DEBEZIUM_LIBS" -name '*.jar' | wc -l) jars)"
}

case "${1:-}" in
fetch) debezium_fetch ;;
*)
	echo "usage: $0 fetch" >&2
	exit 2
	;;
esac
