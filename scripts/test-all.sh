#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (daemon, codec, Rust and C
# SDKs), the other SDKs, and interop tests with third-party fluent-logger clients.
# Installs what it needs first (Debian packages, Python venvs, npm and Maven deps).
# Prints one line per suite, every test that skipped, and a closing
# "suites: N passed, N failed, N tests skipped" line.
#
# A test that cannot run on this machine (no /dev/fuse, not root, ...) prints
# "SKIPPED: <test>: <reason>" and passes. In CI (CI=true, as .ci/run sets) and
# on a machine that can run everything (root with /dev/fuse),
# NAGARE_TEST_REQUIRE=1 makes such a test fail instead.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NAGARE_BIN="$ROOT/target/release/nagare"
export CARGO_TERM_COLOR=never
if [ "${CI:-}" = true ] || { [ "$(id -u)" = 0 ] && [ -e /dev/fuse ]; }; then
  export NAGARE_TEST_REQUIRE=1
fi

LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
results=()
skips=()
passed=0
failed=0
suite() { # suite NAME COMMAND...: runs COMMAND, keeps its output to count skips
  local name=$1; shift
  echo "=== $name: $*"
  local start=$SECONDS log
  log="$LOGS/$(printf '%s' "$name" | tr -c 'A-Za-z0-9' _).log"
  if "$@" 2>&1 | tee "$log"; then
    results+=("ok    $name ($((SECONDS - start))s)"); passed=$((passed + 1))
  else
    results+=("FAIL  $name ($((SECONDS - start))s)"); failed=$((failed + 1))
  fi
  local line
  while IFS= read -r line; do
    skips+=("$line")
  done < <(grep -o 'SKIPPED: .*' "$log")
}

bg_suite() { # bg_suite NAME COMMAND...: starts one suite in the background
  BG_NAME=$1; shift
  echo "=== $BG_NAME (in the background; its output follows when it ends): $*"
  BG_LOG="$LOGS/$(printf '%s' "$BG_NAME" | tr -c 'A-Za-z0-9' _).log"
  (
    start=$SECONDS
    if "$@" >"$BG_LOG" 2>&1; then status=ok; else status=FAIL; fi
    echo "$status $((SECONDS - start))" >"$BG_LOG.status"
  ) &
  BG_PID=$!
}
finish_bg_suite() { # waits for the background suite, prints its output, counts it
  wait "$BG_PID"
  echo "=== $BG_NAME (output)"
  cat "$BG_LOG"
  local status secs line
  read -r status secs <"$BG_LOG.status" || { status=FAIL; secs=?; }
  if [ "$status" = ok ]; then
    results+=("ok    $BG_NAME (${secs}s, in the background)"); passed=$((passed + 1))
  else
    results+=("FAIL  $BG_NAME (${secs}s, in the background)"); failed=$((failed + 1))
  fi
  while IFS= read -r line; do
    skips+=("$line")
  done < <(grep -o 'SKIPPED: .*' "$BG_LOG")
}

# --- set-up: Debian packages the suites need ----------------------------------
need_apt=()
need() { # need COMMAND PACKAGE
  command -v "$1" >/dev/null || need_apt+=("$2")
}
need cc build-essential          # the linker, zstd's C sources, the C SDK's tests
need adduser adduser             # the Debian package's postinst (tests/package)
need socat socat
need curl curl
need fusermount3 fuse3           # the fuse input's tests
need ip iproute2                 # a private network namespace for cli.rs; the hosts of tests/it/cluster.rs (ip)
need iptables iptables           # tests/it/cluster.rs: a link's packets to an NFQUEUE (delay, loss, reordering without netem)
need python3 python3             # fuse tests write through python3; exec filter tests run Python programs
need redis-server redis-server   # the redis input and output tests (tests/it/redis.rs)
need logger bsdutils             # the syslog input tests send with util-linux logger (tests/it/syslog.rs)
[ -x /lib/systemd/systemd-journald ] || need_apt+=(systemd)  # journald, journalctl, systemd-cat: the journald input's tests (tests/it/journald.rs)
need nsenter util-linux          # unshare and nsenter: the journald tests' mount namespace
need rsyslogd rsyslog            # rsyslog forwards to and receives from nagare (tests/it/syslog.rs)
ls /usr/lib/*/rsyslog/lmnsd_gtls.so >/dev/null 2>&1 || need_apt+=(rsyslog-gnutls)  # rsyslog's TLS driver: the syslog output over TLS (tests/it/syslog.rs)
need dnsmasq dnsmasq-base        # a DNS server for the forward output's service discovery (tests/it/balance.rs)
need tmux tmux                   # `nagare top` in a terminal (tests/it/top.rs)
need chromium chromium           # the monitor's status page in a browser (tests/status-page)
need openssl openssl             # a CA and a server certificate for the redis TLS test
need ruby ruby                   # a TLS server set up as Fluentd's in_forward sets up OpenSSL (tests/it/tls.rs)
need java default-jre-headless   # the Kafka broker of the kafka tests (tests/kafka/broker.sh)
need mvn maven                   # fetches the broker's jars (tests/kafka/fetch.sh)
need javac default-jdk-headless  # compiles the OpenSearch launcher of the elasticsearch tests (tests/opensearch/fetch.sh)
need cmake cmake                 # builds librdkafka into nagare (the kafka input and output)
need clickhouse-server clickhouse-server  # the clickhouse output's tests (tests/it/clickhouse.rs)
need clickhouse-client clickhouse-client  # reads their rows back
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql-15)  # the postgresql output's tests (tests/it/postgresql.rs): initdb, pg_ctl, psql
pkg-config --exists libssl 2>/dev/null || need_apt+=(libssl-dev)  # OpenSSL, linked statically into librdkafka
need dockerd docker.io           # a real Docker engine: its fluentd, json-file, gelf and syslog log drivers (tests/it/containers.rs, gelf.rs)
need busybox busybox-static      # the one image those containers run (docker import; nothing is pulled)
need gzip gzip                   # the kubelet's compressed rotated logs (tests/it/containers.rs)
need thrift thrift-compiler       # Python code generated from the Scribe IDL (crates/nagare/tests/it/scribe.rs)
need pkg-config pkg-config       # the rest: nagare-bench's `png` feature (suite below)
pkg-config --exists fontconfig 2>/dev/null || need_apt+=(libfontconfig1-dev)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "not root: cannot install ${need_apt[*]}; suites that need them will fail" >&2
  fi
fi

# The Kafka broker's jars, once, into a cache outside the repository.
bash tests/kafka/fetch.sh >/dev/null || echo "cannot fetch the Kafka jars; the kafka tests will fail" >&2
# OpenSearch's jars and its launcher, once, into a cache outside the repository.
bash tests/opensearch/fetch.sh >/dev/null || echo "cannot fetch the OpenSearch jars; the elasticsearch tests will fail" >&2
# The OpenTelemetry Python SDK (a client that is not nagare's) for tests/it/opentelemetry.rs.
otlp=crates/nagare/tests/otlp
if [ ! -x "$otlp/.venv/bin/python" ]; then
  python3 -m venv "$otlp/.venv" && "$otlp/.venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check -r "$otlp/requirements.txt"
fi
# Elasticsearch's and OpenSearch's Python clients (and a Splunk HEC client)
# for tests/it/receivers.rs.
receivers=crates/nagare/tests/receivers
if [ ! -x "$receivers/.venv/bin/python" ]; then
  python3 -m venv "$receivers/.venv" && "$receivers/.venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check -r "$receivers/requirements.txt"
fi
# graypy (a GELF client that is not nagare's) for tests/it/gelf.rs.
gelf=crates/nagare/tests/gelf
if [ ! -x "$gelf/.venv/bin/python" ]; then
  python3 -m venv "$gelf/.venv" && "$gelf/.venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check -r "$gelf/requirements.txt"
fi
# elastic/go-lumber's client (Go module proxy), the Lumberjack v2 sender of
# the beats input's tests.
(cd "$receivers/lumber" && go build -o lumber .) || echo "cannot build the go-lumber sender; the beats tests will fail" >&2

# versitygw (an S3 server, Apache-2.0) for tests/it/s3.rs, once, into a
# cache outside the repository (the tests look there).
gobin="${XDG_CACHE_HOME:-$HOME/.cache}/nagare-go/bin"
if [ ! -x "$gobin/versitygw" ]; then
  GOBIN="$gobin" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 \
    || echo "cannot install versitygw; the s3 tests will fail" >&2
fi
# Azurite (Microsoft's Azure Storage emulator, npm) for tests/it/azure_blob.rs,
# once, into a cache outside the repository; the venv below reads with boto3 (s3) and
# azure-storage-blob (azure_blob), clients that are not nagare's.
azurite="${XDG_CACHE_HOME:-$HOME/.cache}/nagare-test/azurite"
if [ ! -x "$azurite/node_modules/.bin/azurite-blob" ]; then
  mkdir -p "$azurite" && (cd "$azurite" && npm install --no-audit --no-fund --silent azurite@3.37.0) \
    || echo "cannot install Azurite; the azure_blob tests will fail" >&2
fi
objects=crates/nagare/tests/objects
if [ ! -x "$objects/.venv/bin/python" ]; then
  python3 -m venv "$objects/.venv" && "$objects/.venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check -r "$objects/requirements.txt"
fi

# VictoriaLogs (Loki push API and Splunk HEC) for tests/it/loki.rs and
# splunk_hec.rs, once, into a cache outside the repository.
vl_bin="$HOME/.cache/nagare-test/gobin/victoria-logs"
if [ ! -x "$vl_bin" ]; then
  GOBIN="$(dirname "$vl_bin")" go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v1.52.1 \
    || echo "cannot install victoria-logs; the loki and splunk_hec tests will fail" >&2
fi

# --- Rust --------------------------------------------------------------------
suite "cargo fmt" cargo fmt --all -- --check
# cargo fmt does not reach the plugin files: their `mod` lines are written
# inside the registry! macro. rustfmt on every source file does.
suite "rustfmt (every file)" bash -c 'find crates sdk/rust sdk/c docs/contributing -name "*.rs" -not -path "*/target/*" -print0 | xargs -0 rustfmt --edition 2021 --check'
# The layers of crates/nagare/src (lib.rs's module comment): no upward
# import, no circle, no plugin importing a sibling.
suite "layers" bash scripts/check-layers.sh
# The daemon alone (no workspace feature unification): tests check it links
# no font library.
suite "cargo build --release" cargo build --release --locked -p nagare
suite "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
suite "cargo clippy (png)" cargo clippy -p nagare-bench --features png --all-targets --locked -- -D warnings
# nagare bench's PNG plots (font stack), kept out of the daemon by default.
suite "cargo test (png plots)" cargo test -p nagare-bench --features png --locked --test bench
# The conformance suite's Rust and C drivers, built now: once `cargo test`
# runs in the background it holds cargo's lock on target/ until it ends.
suite "conformance drivers (build)" cargo build --locked -p nagare-logger -p nagare-logger-c --example conformance_driver --lib
export NAGARE_CONFORMANCE_PREBUILT=1
# --no-fail-fast: one failing test binary must not hide the others' results.
# It runs in the background while the suites below run: much of its time
# and theirs is spent waiting on sockets, processes and timers, and CI has
# two cores and 30 minutes. Its output is printed when it ends.
bg_suite "cargo test" cargo test --workspace --locked --no-fail-fast
# The Debian package: build, dpkg -i, run as user nagare, purge (root only).
suite "package (.deb)" bash tests/package/test.sh

# --- SDKs and interop (each directory brings its own runner) -----------------
# sdk/conformance runs every SDK's driver: after the SDK suites set them up.
for d in sdk/python sdk/go sdk/java sdk/typescript sdk/conformance tests/interop tests/status-page; do
  if [ -f "$d/ci.sh" ]; then
    suite "$d" bash "$d/ci.sh"
  fi
done

finish_bg_suite

echo
echo "=== summary"
printf '%s\n' "${results[@]}"
[ ${#skips[@]} -eq 0 ] || printf '%s\n' "${skips[@]}"
echo "suites: $passed passed, $failed failed, ${#skips[@]} tests skipped"
[ "$failed" -eq 0 ]
