#!/usr/bin/env bash
# Fetches the jars of the single-node OpenSearch server that the
# elasticsearch tests and bench start (pom.xml next to this file: the server,
# its Netty4 HTTP layer, log4j and their runtime dependencies) into a cache
# outside the repository, compiles Launcher.java against them, once, and
# prints the folder that holds them (libs/ and classes/). Needs java, javac
# and mvn.
#   NAGARE_OPENSEARCH_HOME  the cache (default ~/.cache/nagare-opensearch)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's:.*<opensearch.version>\(.*\)</opensearch.version>.*:\1:p' "$here/pom.xml")
dir="${NAGARE_OPENSEARCH_HOME:-$HOME/.cache/nagare-opensearch}/$version"
# The launcher is compiled again when it changes (its hash names the build).
sum=$(sha256sum "$here/Launcher.java" | cut -c1-16)
if [ ! -e "$dir/complete" ]; then
  rm -rf "$dir.tmp"
  mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$dir.tmp/libs" >&2
  touch "$dir.tmp/complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
if [ ! -e "$dir/classes-$sum/Launcher.class" ]; then
  rm -rf "$dir/classes.tmp"
  javac -nowarn -d "$dir/classes.tmp" -cp "$dir/libs/*" "$here/Launcher.java" >&2
  rm -rf "$dir"/classes-* && mv "$dir/classes.tmp" "$dir/classes-$sum"
fi
ln -sfn "classes-$sum" "$dir/classes"
echo "$dir"
