#!/usr/bin/env bash
# Installs (pinned, from package-lock.json), starts and stops Azurite's blob
# service for rollstore's tests. Nothing here relies on a global install.
#
#   azurite.sh install            npm ci into test/azurite/node_modules (once)
#   azurite.sh run -- CMD ARGS    start Azurite, run CMD with
#                                 ROLLSTORE_AZURITE_CONNECTION_STRING set,
#                                 stop Azurite by PID (also on failure), exit
#                                 with CMD's status
#   azurite.sh start              start in the background; prints `export` lines
#   azurite.sh stop               stop the instance started by `start`
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${AZURITE_STATE_DIR:-$here/.state}
bin=$here/node_modules/.bin/azurite-blob
# The well-known development account key published in Microsoft's Azurite docs.
account=devstoreaccount1
key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

log() { printf 'azurite: %s\n' "$*" >&2; }

install() {
	if [ -x "$bin" ] && [ "$here/node_modules/.package-lock.json" -nt "$here/package-lock.json" ]; then
		return 0
	fi
	command -v npm >/dev/null || { log "npm not found: install Node.js (>= 20) and npm"; exit 1; }
	log "installing pinned Azurite (npm ci)"
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

free_port() {
	node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

start() {
	install
	mkdir -p "$state"
	if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
		log "already running (pid $(cat "$state/pid"))"
		print_env
		return 0
	fi
	local port data tries=0
	data=$(mktemp -d "${TMPDIR:-/tmp}/rollstore-azurite.XXXXXX")
	# Azurite can lose the race for a port between free_port and bind; retry.
	while :; do
		port=$(free_port)
		"$bin" --blobHost 127.0.0.1 --blobPort "$port" --location "$data" \
			--skipApiVersionCheck --disableTelemetry --silent >"$state/log" 2>&1 &
		echo $! >"$state/pid"
		echo "$port" >"$state/port"
		echo "$data" >"$state/data"
		if wait_ready "$port"; then break; fi
		kill "$(cat "$state/pid")" 2>/dev/null || true
		tries=$((tries + 1))
		if [ $tries -ge 3 ]; then
			log "did not start; log follows"; cat "$state/log" >&2; exit 1
		fi
	done
	log "blob service on 127.0.0.1:$port (pid $(cat "$state/pid"))"
	print_env
}

wait_ready() {
	local port=$1 i
	for i in $(seq 1 100); do
		kill -0 "$(cat "$state/pid")" 2>/dev/null || return 1
		# Any HTTP answer means the blob service is listening.
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	return 1
}

conn_string() {
	printf 'DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://127.0.0.1:%s/%s;' \
		"$account" "$key" "$(cat "$state/port")" "$account"
}

print_env() { printf 'export ROLLSTORE_AZURITE_CONNECTION_STRING=%q\n' "$(conn_string)"; }

stop() {
	[ -f "$state/pid" ] || return 0
	local pid; pid=$(cat "$state/pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	[ -f "$state/data" ] && rm -rf "$(cat "$state/data")"
	rm -f "$state/pid" "$state/port" "$state/data"
}

run() {
	[ "${1:-}" = "--" ] && shift
	# A private state dir per run, so concurrent runs never share an instance.
	state=$(mktemp -d "${TMPDIR:-/tmp}/rollstore-azurite-state.XXXXXX")
	trap 'stop; rm -rf "$state"' EXIT
	trap 'exit 130' INT TERM
	start >/dev/null
	ROLLSTORE_AZURITE_CONNECTION_STRING=$(conn_string)
	export ROLLSTORE_AZURITE_CONNECTION_STRING
	log "running: $*"
	local rc=0
	"$@" || rc=$?
	return $rc
}

cmd=${1:-}
shift || true
case "$cmd" in
install) install ;;
start) start ;;
stop) stop ;;
run) run "$@" ;;
*) echo "usage: $0 install|start|stop|run -- CMD..." >&2; exit 2 ;;
esac
