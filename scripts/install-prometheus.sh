#!/usr/bin/env bash
# Fetches prometheus and promtool from Debian's package and unpacks them into
# the project's cache: no system install, no service started. Prints the
# directory; its usr/bin holds both binaries. Idempotent.
#
# The version is pinned; if Debian has rebuilt the package since (a new
# +bN revision of the same upstream version), that rebuild is used instead.
set -euo pipefail
VERSION="2.42.0+ds-5+b6"
UPSTREAM="${VERSION%%+*}"
base="${MH_PROMETHEUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/maintenance-handler}"
for dir in "$base"/prometheus-"$UPSTREAM"*; do
	if [ -x "$dir/usr/bin/promtool" ] && [ -x "$dir/usr/bin/prometheus" ]; then
		echo "prometheus: reusing $dir" >&2
		echo "$dir"
		exit 0
	fi
done
available() { apt-cache madison prometheus 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}'; }
if ! available | grep -q .; then
	echo "prometheus: refreshing Debian's package lists" >&2
	if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2; else sudo apt-get update -qq >&2; fi
fi
version="$VERSION"
if ! available | grep -qxF "$VERSION"; then
	version="$(available | grep -F "$UPSTREAM+" | head -n1 || true)"
	if [ -z "$version" ]; then
		echo "prometheus: Debian offers no prometheus $UPSTREAM (have: $(available | tr '\n' ' '))" >&2
		exit 1
	fi
	echo "prometheus: $VERSION is gone from the archive; using Debian's rebuild $version" >&2
fi
dir="$base/prometheus-$version"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "prometheus: downloading Debian's prometheus $version" >&2
(cd "$tmp" && apt-get download -q "prometheus=$version" >&2)
mkdir -p "$base"
rm -rf "$dir.partial"
dpkg-deb -x "$tmp"/prometheus_*.deb "$dir.partial"
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "prometheus: installed in $dir" >&2
echo "$dir"
