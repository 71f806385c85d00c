#!/bin/sh
# Prints the path of a promtool for the rules' unit tests, installing none
# system-wide: $PROMTOOL if set, a promtool on PATH, else Debian's
# prometheus package (pinned) downloaded and unpacked into the user's cache
# (apt-get download and dpkg -x: no daemon, no postinst). Exits non-zero
# when none can be had; the test then builds the promtool pinned in go.mod.
set -eu
VERSION=2.42.0+ds-5+b6
if [ -n "${PROMTOOL:-}" ]; then echo "$PROMTOOL"; exit 0; fi
if p=$(command -v promtool 2>/dev/null); then echo "$p"; exit 0; fi
dir="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/rollstore/prometheus-$VERSION"
bin="$dir/root/usr/bin/promtool"
if [ ! -x "$bin" ]; then
	command -v apt-get >/dev/null && command -v dpkg >/dev/null || exit 1
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download -q "prometheus=$VERSION" >/dev/null 2>&1) || exit 1
	mkdir -p "$dir"
	dpkg -x "$tmp"/prometheus_*.deb "$dir/root"
fi
"$bin" --version >/dev/null 2>&1 || exit 1
echo "$bin"
