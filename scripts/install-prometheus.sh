#!/usr/bin/env bash
# Fetches prometheus and promtool from Debian's package (pinned) and unpacks
# them into the project's cache: no system install, no service started.
# Prints the directory; its usr/bin holds both binaries. Idempotent.
set -euo pipefail
VERSION="2.42.0+ds-5+b6"
cache="${MH_PROMETHEUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/maintenance-handler/prometheus-${VERSION}}"
if [ -x "$cache/usr/bin/promtool" ] && [ -x "$cache/usr/bin/prometheus" ]; then
	echo "prometheus: reusing $cache" >&2
	echo "$cache"
	exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! apt-cache show "prometheus=$VERSION" >/dev/null 2>&1; then
	echo "prometheus: refreshing Debian's package lists" >&2
	if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2; else sudo apt-get update -qq >&2; fi
fi
echo "prometheus: downloading Debian's prometheus $VERSION" >&2
(cd "$tmp" && apt-get download -q "prometheus=$VERSION" >&2)
mkdir -p "$(dirname "$cache")"
rm -rf "$cache.partial"
dpkg-deb -x "$tmp"/prometheus_*.deb "$cache.partial"
rm -rf "$cache"
mv "$cache.partial" "$cache"
echo "prometheus: installed in $cache" >&2
echo "$cache"
