#!/usr/bin/env bash
# Builds the Debian package of nagare from a built binary, with dpkg-deb
# alone (no debhelper, no cargo-deb):
#   scripts/build-deb.sh [BINARY] [OUTDIR]
# BINARY defaults to target/release/nagare (`cargo build --release -p nagare`),
# OUTDIR to target/debian. Prints the path of the .deb it wrote.
#
# The package holds /usr/bin/nagare, the systemd unit, the default
# /etc/nagare/nagare.toml (a conffile), a logrotate file and the docs; its
# maintainer scripts (packaging/debian/) create the `nagare` user and
# /var/lib/nagare, /var/log/nagare.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/nagare}
OUT=${2:-target/debian}

[ -x "$BIN" ] || { echo "build-deb: $BIN: no such executable (cargo build --release -p nagare)" >&2; exit 1; }
# The version the binary reports, so package and binary cannot disagree.
VERSION=$("$BIN" --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
[ -n "$VERSION" ] || { echo "build-deb: $BIN --version printed no version" >&2; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
install -D -m 0755 "$BIN" "$STAGE/usr/bin/nagare"
install -D -m 0644 packaging/nagare.service "$STAGE/usr/lib/systemd/system/nagare.service"
install -D -m 0644 packaging/nagare.toml "$STAGE/etc/nagare/nagare.toml"
install -D -m 0644 packaging/nagare.logrotate "$STAGE/etc/logrotate.d/nagare"
for doc in README.md docs/operations.md docs/configuration.md docs/plugins.md; do
  [ -f "$doc" ] && install -D -m 0644 "$doc" "$STAGE/usr/share/doc/nagare/$(basename "$doc")"
done
install -D -m 0644 LICENSE "$STAGE/usr/share/doc/nagare/copyright"
strip --strip-unneeded "$STAGE/usr/bin/nagare" 2>/dev/null || true

mkdir -p "$STAGE/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$STAGE/DEBIAN/"
printf '/etc/nagare/nagare.toml\n/etc/logrotate.d/nagare\n' >"$STAGE/DEBIAN/conffiles"
# The shared libraries the binary links (libc, libgcc_s, libm, ...), by package.
# (Names only: without debhelper's shlibs there are no version bounds.)
LIBS=$({ ldd "$BIN" | awk '/=> \//{print $3}' | xargs -r dpkg -S 2>/dev/null || true; } |
  cut -d: -f1 | sort -u | paste -sd, - | sed 's/,/, /g')
cat >"$STAGE/DEBIAN/control" <<CONTROL
Package: nagare
Version: $VERSION
Architecture: $ARCH
Maintainer: nagare developers <nagare@localhost>
Installed-Size: $(du -sk "$STAGE" --exclude=DEBIAN | cut -f1)
Depends: ${LIBS:+$LIBS, }adduser
Section: admin
Priority: optional
Description: log and event collector speaking Fluentd's forward protocol
 nagare receives events from applications, files and queues, routes them by
 tag, transforms them, buffers them safely and delivers them to files, other
 collectors, queues and stores. This package runs it as the systemd service
 nagare.service, as the unprivileged user nagare, on /etc/nagare/nagare.toml.
CONTROL

mkdir -p "$OUT"
DEB="$OUT/nagare_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group --build "$STAGE" "$DEB" >/dev/null
readlink -f "$DEB"
