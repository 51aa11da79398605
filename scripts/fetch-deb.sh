#!/usr/bin/env bash
# Fetches one Debian package (the version apt would install, for ARCH, the
# machine's by default) and unpacks it into the project's cache: no system
# install, nothing run from it. Prints the directory it is unpacked in.
# Idempotent: a package already unpacked at that version is reused.
#
#   scripts/fetch-deb.sh tzdata            # an arch: all package
#   scripts/fetch-deb.sh runc amd64
set -euo pipefail
pkg="$1"
arch="${2:-$(dpkg --print-architecture)}"
base="${MH_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/maintenance-handler/debs}"
candidate() { apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version="$(candidate)"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	echo "fetch-deb: refreshing Debian's package lists" >&2
	if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2; else sudo apt-get update -qq >&2; fi
	version="$(candidate)"
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	echo "fetch-deb: Debian offers no package $pkg" >&2
	exit 1
fi
dir="$base/${pkg}_${version}_${arch}"
if [ -f "$dir/.complete" ]; then
	echo "$dir"
	exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-deb: downloading Debian's $pkg $version ($arch)" >&2
(cd "$tmp" && apt-get download -q "$pkg:$arch=$version" >&2)
mkdir -p "$base"
rm -rf "$dir.partial"
dpkg-deb -x "$tmp"/*.deb "$dir.partial"
echo "$version" >"$dir.partial/.version"
touch "$dir.partial/.complete"
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "$dir"
