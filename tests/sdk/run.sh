#!/bin/sh
# Runs the public E2B JS SDK against real sandcell brokers, twice:
#  1. in debug mode, as a developer runs it: code at http://localhost:49999,
#     envd (files, commands) at http://localhost:49983, both hard-coded in the
#     SDK; skipped (said) when 49999 is busy, a failure when only 49983 is;
#  2. through one URL (the SDK's sandboxUrl, as behind E2B's proxy or an
#     ingress), on a free port: the code listener serves envd's API too,
#     told by E2b-Sandbox-Port; envd's own listener is on another free port.
# Each run has a fresh broker. Usage: tests/sdk/run.sh BIN_DIR
set -u
bin=${1:?usage: run.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp /tmp/sandcell-sdk-out.XXXXXX)
broker=
run_dir=

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop_broker() {
	[ -n "$broker" ] && { kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null; }
	[ -n "$run_dir" ] && rm -rf "$run_dir" "$run_dir.work" "$run_dir.work.img" "$run_dir.log"
	broker=
	run_dir=
}
trap 'stop_broker; rm -f "$out"' EXIT INT TERM

# start_broker CODE_PORT ENVD_PORT: a fresh broker, once both answer
start_broker() {
	run_dir=$(mktemp -d /tmp/sandcell-sdk.XXXXXX)
	"$bin/sandcell-broker" --listen "127.0.0.1:$1" --envd-listen "127.0.0.1:$2" \
		--run-dir "$run_dir" --log-level warn >"$run_dir.log" 2>&1 &
	broker=$!
	for _ in $(seq 100); do
		curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/health" && break
		sleep 0.1
	done
	for _ in $(seq 100); do # envd answers 204 once its agent runs
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$2/health")" = 204 ] &&
			break
		sleep 0.1
	done
}

# run_sdk [SANDCELL_URL]: the SDK's checks, their lines kept in $out
run_sdk() {
	(cd "$here" && SANDCELL_URL=${1:-} node sdk_test.mjs) >"$out.run" 2>&1
	status=$?
	cat "$out.run"
	cat "$out.run" >>"$out"
	rm -f "$out.run"
	[ $status -eq 0 ] || { echo "sdk: broker log:"; tail -50 "$run_dir.log"; }
	return $status
}

unset SANDCELL_URL
rc=0
if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:49999/health"; then
	echo "sdk: port 49999 is busy: the debug-mode run is skipped"
elif curl -s -o /dev/null --max-time 1 "http://127.0.0.1:49983/health"; then
	echo "sdk: port 49983 is taken: the SDK's debug mode sends files and commands there (envd); stop what listens on it"
	echo "0 passed, 1 failed" >>"$out"
	rc=1
else
	echo "sdk: debug mode, http://localhost:49999 and http://localhost:49983"
	start_broker 49999 49983
	run_sdk || rc=1
	stop_broker
fi
port=$(free_port)
echo "sdk: one URL, http://localhost:$port"
start_broker "$port" "$(free_port)"
run_sdk "http://localhost:$port" || rc=1
stop_broker
# both runs' counts as the closing line
awk '/^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 } END { print p " passed, " f " failed" }' "$out"
exit $rc
