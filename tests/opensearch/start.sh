#!/usr/bin/env bash
# Runs a single-node OpenSearch server on loopback (Launcher.java: a Node with
# the Netty4 plugin, no distribution), for the elasticsearch tests
# (crates/nagare/tests/it/common/opensearch.rs) and the bench
# (benches/elasticsearch.sh):
#
#   tests/opensearch/start.sh DIR HTTP_PORT TRANSPORT_PORT [KEY=VALUE...]
#
# DIR holds the node's data and logs (a restart on the same DIR keeps the
# data); KEY=VALUE are more node settings (e.g.
# thread_pool.write.queue_size=4). Execs the JVM in the foreground (its pid
# is this script's), logging to stdout; prints "opensearch started" once
# the node runs.
#   OPENSEARCH_JAVA_OPTS  JVM options (default: a small heap, a quick start)
set -euo pipefail
dir=$1; shift
home="$("$(dirname "$0")/fetch.sh")"
mkdir -p "$dir"
java_opts=${OPENSEARCH_JAVA_OPTS:--Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
# shellcheck disable=SC2086
exec java $java_opts -Dlog4j2.disable.jmx=true -cp "$home/libs/*:$home/classes" Launcher "$dir" "$@"
