#!/bin/sh
# envd's API against the machine's own: files.write / files.read of 1 and 16
# MiB through the published E2B SDK against a plain `cp` of the same file, and
# commands.run('true') against runCode('x=1') (POST /execute), medians of
# several runs taken in turn in one go, with the machine's load printed
# before and after. A fresh broker on free ports, reached through one URL
# (the SDK's sandboxUrl). Not part of `make test`: `make bench-envd`, or
#   sh tests/bench/envd.sh BIN_DIR [RUNS]
# Needs the SDK in tests/sdk/node_modules (npm install --prefix tests/sdk).
set -u
bin=${1:?usage: envd.sh BIN_DIR [RUNS]}
runs=${2:-9}
here=$(cd "$(dirname "$0")" && pwd)
run_dir=$(mktemp -d /tmp/sandcell-bench-envd.XXXXXX)
broker=

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
stop() {
	[ -n "$broker" ] && { kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null; }
	rm -rf "$run_dir" "$run_dir.work" "$run_dir.work.img" "$run_dir.log"
}
trap stop EXIT INT TERM

port=$(free_port)
envd_port=$(free_port)
"$bin/sandcell-broker" --listen "127.0.0.1:$port" --envd-listen "127.0.0.1:$envd_port" \
	--run-dir "$run_dir" --max-body 64M --log-level warn >"$run_dir.log" 2>&1 &
broker=$!
for _ in $(seq 300); do
	[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$envd_port/health")" = 204 ] &&
		break
	sleep 0.1
done
echo "envd bench: $(nproc) CPUs, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
SANDCELL_URL="http://localhost:$port" RUNS=$runs node "$here/envd.mjs"
rc=$?
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ $rc -eq 0 ] || tail -20 "$run_dir.log"
exit $rc
