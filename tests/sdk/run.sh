#!/bin/sh
# Runs the public E2B JS SDK (debug mode) against a real sandcell broker.
# Usage: tests/sdk/run.sh BIN_DIR. Uses port 49999 (the SDK's debug address)
# when it is free, else another port passed to the SDK as its sandbox URL.
set -u
bin=${1:?usage: run.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
run_dir=$(mktemp -d /tmp/sandcell-sdk.XXXXXX)
port=49999
if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/health"; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	export SANDCELL_URL="http://localhost:$port"
	echo "sdk: port 49999 is busy; using $SANDCELL_URL"
fi
# envd's port is hard-coded in the SDK's debug mode: it must be ours
if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:49983/health"; then
	echo "sdk: port 49983 is taken: the SDK's debug mode sends files there (envd); stop what listens on it"
	echo "0 passed, 1 failed"
	exit 1
fi
"$bin/sandcell-broker" --listen "127.0.0.1:$port" --envd-listen 127.0.0.1:49983 \
	--run-dir "$run_dir" --log-level warn >"$run_dir.log" 2>&1 &
broker=$!
cleanup() {
	kill "$broker" 2>/dev/null
	wait "$broker" 2>/dev/null
	rm -rf "$run_dir" "$run_dir.work" "$run_dir.log"
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do
	curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/health" && break
	sleep 0.1
done
for _ in $(seq 100); do # envd answers 204 once its agent runs
	[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:49983/health)" = 204 ] && break
	sleep 0.1
done
(cd "$here" && node sdk_test.mjs)
rc=$?
[ $rc -eq 0 ] || { echo "sdk: broker log:"; tail -50 "$run_dir.log"; }
exit $rc
