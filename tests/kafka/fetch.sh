#!/usr/bin/env bash
# Fetches the jars of the Kafka broker that the tests and benches start
# (pom.xml next to this file: the broker, the perf tools and their runtime
# dependencies) into a cache outside the repository, once, and prints the
# folder that holds them. Needs java and mvn.
#   NAGARE_KAFKA_HOME  the cache (default ~/.cache/nagare-kafka)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
dir="${NAGARE_KAFKA_HOME:-$HOME/.cache/nagare-kafka}/$version"
if [ ! -e "$dir/complete" ]; then
  rm -rf "$dir.tmp"
  mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$dir.tmp/libs" >&2
  touch "$dir.tmp/complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
echo "$dir"
