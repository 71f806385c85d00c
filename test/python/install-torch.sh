#!/usr/bin/env bash
# Makes sure a python3 that imports torch is installed, for the PyTorch
# tests of the Python client's training adapter (python/tests/
# test_training.py, run by TestPythonClient in cmd/rollstore), and prints
# that interpreter's path as the last line of stdout. Idempotent: a python3
# that already imports torch is reused and nothing is downloaded. Otherwise
# it installs Debian's `python3-torch` package (CPU only; ~150 MB of
# archives, ~650 MB installed) with apt-get, which needs root, for Debian's
# /usr/bin/python3; it exits non-zero, with the reason on stderr, where it
# cannot (another OS, no root, no mirror), and those tests then skip.
#
# ROLLSTORE_TORCH_PYTHON=/path/to/python uses that interpreter instead (it
# must import torch).
set -euo pipefail

# has_torch python: whether python imports torch; says which torch on stderr.
has_torch() {
	local v
	v=$("$1" -c 'import torch; print(torch.__version__)' 2>/dev/null) || return 1
	echo "torch $v ($1)" >&2
}

found() {
	echo "$1"
	exit 0
}

if [ -n "${ROLLSTORE_TORCH_PYTHON:-}" ]; then
	[ -x "$ROLLSTORE_TORCH_PYTHON" ] || { echo "ROLLSTORE_TORCH_PYTHON=$ROLLSTORE_TORCH_PYTHON is not an executable" >&2; exit 1; }
	has_torch "$ROLLSTORE_TORCH_PYTHON" || { echo "ROLLSTORE_TORCH_PYTHON=$ROLLSTORE_TORCH_PYTHON cannot import torch" >&2; exit 1; }
	found "$ROLLSTORE_TORCH_PYTHON"
fi
# The python3 on PATH first (it runs the other Python tests), then Debian's,
# which is where python3-torch installs.
for p in "$(command -v python3 || true)" /usr/bin/python3; do
	if [ -n "$p" ] && [ -x "$p" ] && has_torch "$p"; then found "$p"; fi
done

command -v apt-get >/dev/null || { echo "no python3 with torch, and no apt-get to install python3-torch with (not Debian?)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "no python3 with torch, and installing it with apt-get needs root (run: sudo apt-get install --no-install-recommends python3-torch)" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
# Wait for another apt-get (a parallel test run) rather than failing on its lock.
apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
echo "installing python3-torch with apt-get (once; ~150 MB)" >&2
# Quietly: the log of a package install would bury the test's output. It is
# shown if the install fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { "${apt[@]}" install --no-install-recommends python3-torch >"$log" 2>&1 ||
	{ "${apt[@]}" update >>"$log" 2>&1 && "${apt[@]}" install --no-install-recommends python3-torch >>"$log" 2>&1; }; }; then
	tail -n 20 "$log" >&2
	echo "apt-get could not install python3-torch" >&2
	exit 1
fi
[ -x /usr/bin/python3 ] && has_torch /usr/bin/python3 ||
	{ echo "apt-get installed python3-torch, yet /usr/bin/python3 cannot import torch" >&2; exit 1; }
found /usr/bin/python3
