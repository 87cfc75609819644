#!/usr/bin/env bash
# The Debian package, end to end: builds it from the release binary
# (scripts/build-deb.sh), installs it with dpkg, checks its files, owners,
# user and unit, runs the daemon as user `nagare` on the installed default
# config (ports moved by environment variables), sends events with
# `nagare cat --ack` and finds them in the event file, stops the daemon,
# then removes and purges the package and checks that nothing is left.
#
# Needs root (dpkg -i); otherwise it prints SKIPPED and passes, unless
# NAGARE_TEST_REQUIRE is set (scripts/test-all.sh sets it in CI).
# The machine is left as it was found: the package is purged on any exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${NAGARE_BIN:-$PWD/target/release/nagare}
N=200
WAIT=20

skip() {
  if [ -n "${NAGARE_TEST_REQUIRE:-}" ]; then
    echo "FAIL: package: cannot run here ($1), and NAGARE_TEST_REQUIRE says every test must run" >&2
    exit 1
  fi
  echo "SKIPPED: package: $1" >&2
  exit 0
}
fail() { echo "FAIL: package: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
# wait_for WHAT COMMAND...: runs COMMAND until it succeeds, for up to $WAIT s.
wait_for() {
  local what=$1 deadline=$((SECONDS + WAIT)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no $what within ${WAIT}s"
    sleep 0.1
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

[ "$(id -u)" = 0 ] || skip "not root: dpkg -i needs root"
command -v dpkg-deb >/dev/null || skip "no dpkg-deb: not a Debian system"
[ -x "$BIN" ] || fail "$BIN: no release binary (cargo build --release -p nagare)"
# Refuse to touch a machine where nagare is installed or its user exists:
# purging at the end would remove what was there before.
if dpkg-query -W -f='${Status}' nagare 2>/dev/null | grep -qv 'not-installed'; then
  fail "a nagare package is already installed; this test would remove it"
fi
getent passwd nagare >/dev/null && fail "a user named nagare exists already; this test would delete it"
[ -e /etc/nagare ] && fail "/etc/nagare exists already; this test would delete it"

WORK=$(mktemp -d)
DAEMON=
cleanup() {
  local rc=$?
  if [ -n "$DAEMON" ] && kill -0 "$DAEMON" 2>/dev/null; then
    kill -KILL "$DAEMON" 2>/dev/null || true
  fi
  if dpkg-query -W nagare >/dev/null 2>&1; then
    dpkg --purge nagare >/dev/null 2>&1 || echo "package: cleanup: dpkg --purge nagare failed" >&2
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# --- build -----------------------------------------------------------------
DEB=$(scripts/build-deb.sh "$BIN" "$WORK/out")
[ -f "$DEB" ] || fail "build-deb.sh printed $DEB, which does not exist"
VERSION=$("$BIN" --version | awk '{print $2}')
[ "$(dpkg-deb -f "$DEB" Package)" = nagare ] || fail "package name"
[ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION" ] || fail "package version is not the binary's $VERSION"
dpkg-deb -f "$DEB" Depends | grep -q adduser || fail "Depends lacks adduser"
dpkg-deb -I "$DEB" conffiles | grep -qx /etc/nagare/nagare.toml || fail "nagare.toml is not a conffile"
contents=$(dpkg-deb -c "$DEB")
for f in ./usr/bin/nagare ./usr/lib/systemd/system/nagare.service ./etc/nagare/nagare.toml \
  ./etc/logrotate.d/nagare ./usr/share/doc/nagare/operations.md; do
  grep -q " $f\$" <<<"$contents" || fail "$f is not in the package"
done
grep -q ' root/root .* ./usr/bin/nagare$' <<<"$contents" || fail "files are not owned by root in the package"
ok "built $(basename "$DEB")"

# --- install ---------------------------------------------------------------
dpkg -i "$DEB" >"$WORK/dpkg-i.log" 2>&1 || { cat "$WORK/dpkg-i.log" >&2; fail "dpkg -i"; }
[ "$(dpkg-query -W -f='${Status}' nagare)" = "install ok installed" ] || fail "not installed"
/usr/bin/nagare --version | grep -qx "nagare $VERSION" || fail "/usr/bin/nagare --version"
IFS=: read -r _ _ uid gid _ home shell < <(getent passwd nagare) || fail "no user nagare"
[ "$uid" -lt 1000 ] || fail "user nagare is not a system user (uid $uid)"
[ "$home" = /var/lib/nagare ] || fail "nagare's home is $home"
[ "$shell" = /usr/sbin/nologin ] || fail "nagare's shell is $shell"
[ "$(getent group nagare | cut -d: -f3)" = "$gid" ] || fail "nagare's group is not nagare"
check_stat() { # PATH OWNER:GROUP MODE
  local got
  got=$(stat -c '%U:%G %a' "$1") || fail "$1 is missing"
  [ "$got" = "$2 $3" ] || fail "$1 is $got, expected $2 $3"
}
check_stat /usr/bin/nagare root:root 755
check_stat /etc/nagare/nagare.toml root:nagare 640
check_stat /var/lib/nagare nagare:nagare 750
check_stat /var/log/nagare nagare:nagare 750
check_stat /usr/lib/systemd/system/nagare.service root:root 644
if command -v systemctl >/dev/null; then
  [ -L /etc/systemd/system/multi-user.target.wants/nagare.service ] ||
    fail "postinst did not enable nagare.service (multi-user.target.wants)"
fi
ok "installed: files, owners, user nagare ($uid:$gid), service enabled"

if command -v systemd-analyze >/dev/null; then
  # network-online.target and the journal are absent in a container;
  # verify must find nothing wrong with the unit itself.
  if ! systemd-analyze verify /usr/lib/systemd/system/nagare.service >"$WORK/verify.log" 2>&1 ||
    grep -q 'nagare.service' "$WORK/verify.log"; then
    cat "$WORK/verify.log" >&2
    fail "systemd-analyze verify nagare.service"
  fi
  ok "systemd-analyze verify: clean"
else
  echo "package: no systemd-analyze here; the unit is not verified" >&2
fi

/usr/bin/nagare check -c /etc/nagare/nagare.toml >"$WORK/check.log" 2>&1 ||
  { cat "$WORK/check.log" >&2; fail "nagare check on the installed config"; }
ok "nagare check: the installed config is valid"

if [ -d /run/systemd/system ]; then
  # Where systemd runs, postinst enabled and started the service: Type=notify
  # made `systemctl` wait for READY=1. Stop it to run the daemon by hand.
  systemctl --quiet is-enabled nagare.service || fail "postinst did not enable nagare.service"
  systemctl --quiet is-active nagare.service || { journalctl -u nagare --no-pager -n 50 >&2 || true; fail "nagare.service is not active after dpkg -i"; }
  systemctl reload nagare.service || fail "systemctl reload nagare"
  systemctl --quiet is-active nagare.service || fail "nagare.service is not active after a reload"
  systemctl stop nagare.service
  ok "systemd: enabled, started (READY=1), reloaded and stopped"
else
  echo "package: systemd does not run here; the service is run by hand only" >&2
fi

# --- run as user nagare, by hand (systemd may not run here) ----------------
FORWARD=$(free_port)
MONITOR=$(free_port)
# What the unit does, without systemd: the user, and the config it names.
setpriv --reuid=nagare --regid=nagare --init-groups --no-new-privs \
  env NAGARE_FORWARD_BIND="127.0.0.1:$FORWARD" NAGARE_MONITOR_BIND="127.0.0.1:$MONITOR" \
  /usr/bin/nagare run -c /etc/nagare/nagare.toml </dev/null >"$WORK/stdout" 2>"$WORK/stderr" &
DAEMON=$!
wait_for "monitor on 127.0.0.1:$MONITOR" curl -sf "http://127.0.0.1:$MONITOR/health"
[ "$(stat -c %U "/proc/$DAEMON")" = nagare ] || fail "the daemon does not run as nagare"

seq 0 $((N - 1)) | awk '{printf "{\"seq\":%d,\"message\":\"packaged %d\"}\n", $1, $1}' |
  /usr/bin/nagare cat --ack --address "127.0.0.1:$FORWARD" pkg.test ||
  fail "nagare cat --ack (daemon stderr: $(cat "$WORK/stderr"))"
events_lines() { cat /var/log/nagare/events/*.log 2>/dev/null | wc -l; }
has_all_events() { [ "$(events_lines)" -ge "$N" ]; }
wait_for "$N lines in /var/log/nagare/events/" has_all_events
# Content, count and order: one JSON line per event, seq 0..N-1 in order.
# Lines are {"time":…,"tag":…,"record":{…}}.
cat /var/log/nagare/events/*.log | python3 -c '
import json, sys
events = [json.loads(l) for l in sys.stdin]
n = int(sys.argv[1])
assert [e["record"]["seq"] for e in events] == list(range(n)), events[:3]
assert all(e["tag"] == "pkg.test" for e in events), events[:3]
assert all(e["record"]["message"] == "packaged %d" % i for i, e in enumerate(events)), events[:3]
' "$N" || fail "the event file does not hold seq 0..$((N - 1)) in order, tag pkg.test, with their messages"
for f in /var/log/nagare/events /var/lib/nagare/buffer/events; do
  [ "$(stat -c %U "$f")" = nagare ] || fail "$f is not owned by nagare"
done
ok "$N events acked, written by user nagare to $(ls /var/log/nagare/events/)"

kill -TERM "$DAEMON"
rc=0
wait "$DAEMON" || rc=$?
DAEMON=
[ "$rc" = 0 ] || { cat "$WORK/stderr" >&2; fail "the daemon exited $rc after SIGTERM"; }
grep -q 'stopped; every buffer drained' "$WORK/stderr" || fail "no clean stop line in the daemon's log"
ok "stopped cleanly (exit 0)"

# --- remove, then purge ----------------------------------------------------
dpkg -r nagare >"$WORK/dpkg-r.log" 2>&1 || { cat "$WORK/dpkg-r.log" >&2; fail "dpkg -r"; }
[ ! -e /usr/bin/nagare ] || fail "dpkg -r left /usr/bin/nagare"
[ ! -e /usr/lib/systemd/system/nagare.service ] || fail "dpkg -r left the unit"
[ -f /etc/nagare/nagare.toml ] || fail "dpkg -r removed the conffile (only purge may)"
[ ! -e /etc/systemd/system/multi-user.target.wants/nagare.service ] || fail "dpkg -r left the service enabled"
ok "removed: binary and unit gone, config kept"

dpkg --purge nagare >"$WORK/dpkg-purge.log" 2>&1 || { cat "$WORK/dpkg-purge.log" >&2; fail "dpkg --purge"; }
for f in /etc/nagare /etc/logrotate.d/nagare /var/lib/nagare /var/log/nagare; do
  [ ! -e "$f" ] || fail "dpkg --purge left $f"
done
! getent passwd nagare >/dev/null || fail "dpkg --purge left the user nagare"
! getent group nagare >/dev/null || fail "dpkg --purge left the group nagare"
! dpkg-query -W nagare >/dev/null 2>&1 || fail "dpkg still knows the package"
ok "purged: nothing left"
