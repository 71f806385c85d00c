#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed, for the browser test
# of the status page (cmd/rollstore/ui_browser_test.go), and prints its path
# as the last line of stdout. Idempotent: an installed Chromium is reused
# and nothing is downloaded. Otherwise it installs Debian's `chromium`
# package with apt-get, which needs root; it exits non-zero, with the reason
# on stderr, where it cannot (another OS, no root, no mirror), and the test
# then skips.
#
# ROLLSTORE_CHROMIUM=/path/to/chrome uses that binary instead.
set -euo pipefail

found() {
	echo "$1"
	exit 0
}

if [ -n "${ROLLSTORE_CHROMIUM:-}" ]; then
	[ -x "$ROLLSTORE_CHROMIUM" ] || { echo "ROLLSTORE_CHROMIUM=$ROLLSTORE_CHROMIUM is not an executable" >&2; exit 1; }
	found "$ROLLSTORE_CHROMIUM"
fi
for b in chromium chromium-browser; do
	if p=$(command -v "$b"); then found "$p"; fi
done

command -v apt-get >/dev/null || { echo "no chromium, and no apt-get to install it with (not Debian?)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "no chromium, and installing it with apt-get needs root (run: sudo apt-get install chromium)" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
# Wait for another apt-get (a parallel test run) rather than failing on its lock.
apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
echo "installing chromium with apt-get (once)" >&2
# Quietly: the log of a package install would bury the test's output. It is
# shown if the install fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { "${apt[@]}" install --no-install-recommends chromium >"$log" 2>&1 ||
	{ "${apt[@]}" update >>"$log" 2>&1 && "${apt[@]}" install --no-install-recommends chromium >>"$log" 2>&1; }; }; then
	tail -n 20 "$log" >&2
	echo "apt-get could not install chromium" >&2
	exit 1
fi
p=$(command -v chromium) || { echo "apt-get installed chromium, yet no chromium is on PATH" >&2; exit 1; }
found "$p"
