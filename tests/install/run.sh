#!/bin/sh
# make install DESTDIR=<scratch> PREFIX=/opt/sc: everything lands under DESTDIR,
# the installed unit names /opt/sc's paths, and the installed broker, started
# without JUPYTER_PATH, offers the kernels installed beside it.
# Usage: tests/install/run.sh BIN_DIR (the binaries make install copies).
set -u
bin=${1:?usage: run.sh BIN_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=/opt/sc
dest=$(mktemp -d /tmp/sandcell-install.XXXXXX)
stamp=$(mktemp /tmp/sandcell-install-stamp.XXXXXX)
run_dir=$dest.run
broker=
pass=0 fail=0
cleanup() {
	[ -n "$broker" ] && kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null
	rm -rf "$dest" "$stamp" "$run_dir" "$run_dir.work" "$dest.log"
}
trap cleanup EXIT INT TERM
check() { # NAME CONDITION...
	name=$1
	shift
	if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "install: FAIL: $name"; fi
}

# outside DESTDIR: what an install without DESTDIR would write
outside="$prefix /etc/systemd/system/sandcell.service /etc/systemd/system/sandcell.slice
	/etc/systemd/system/sandcell.socket"
pre_existing=
for p in $outside; do [ -e "$p" ] && pre_existing="$pre_existing $p"; done
sleep 1 # mtimes are in seconds on some file systems
make -s -C "$root" --no-print-directory install DESTDIR="$dest" PREFIX="$prefix" \
	BIN="$bin" >"$dest.log" 2>&1
rc=$?
check "make install exits 0 ($(tail -3 "$dest.log"))" [ $rc -eq 0 ]

nothing_outside() {
	for p in $outside; do
		case " $pre_existing " in *" $p "*) ;; *) [ -e "$p" ] && { echo "created $p"; return 1; } ;; esac
		[ -n "$(find "$p" -newer "$stamp" 2>/dev/null | head -n 1)" ] && { echo "changed $p"; return 1; }
	done
	stray=$(find "$dest" ! -type d | grep -v -e "^$dest$prefix/" -e "^$dest/etc/systemd/system/")
	[ -z "$stray" ] || { echo "outside PREFIX and the unit dir: $stray"; return 1; }
	return 0
}
check "nothing outside DESTDIR" nothing_outside

unit=$dest/etc/systemd/system/sandcell.service
check "the units are installed" [ -f "$unit" -a -f "$dest/etc/systemd/system/sandcell.slice" \
	-a -f "$dest/etc/systemd/system/sandcell.socket" ]
check "ExecStart names $prefix/bin/sandcell-broker" \
	grep -q "^ExecStart=$prefix/bin/sandcell-broker " "$unit"
check "the unit names no /usr/local path" sh -c "! grep -n /usr/local '$unit'"
for f in bin/sandcell-broker bin/sandcell-proxy bin/sandcellctl \
	share/sandcell/sandcell_startup.py share/sandcell/sandcell_profile.py \
	share/sandcell/sandcell_packages.py share/sandcell/sandcell_kshell.py \
	share/sandcell/sandcell_template.py lib/sandcell/libsandcell-box.so \
	share/sandcell/jupyter/kernels/bash/kernel.json \
	share/sandcell/jupyter/kernels/bash/sandcell_marked.py \
	share/sandcell/jupyter/kernels/java/kernel.json \
	share/sandcell/jupyter/kernels/java/sandcell_marked.py; do
	check "$prefix/$f installed" [ -f "$dest$prefix/$f" ]
done
# a forked box's init executes it: not readable by the kernels' uids
init=$dest$prefix/lib/sandcell/sandcell-init
check "$prefix/lib/sandcell/sandcell-init installed mode 0711 ($(stat -c %a "$init" 2>&1))" \
	[ "$(stat -c %a "$init" 2>/dev/null)" = 711 ]
# envd's agent runs as the contexts' uid: not readable by it either
agent=$dest$prefix/bin/sandcell-envd
check "$prefix/bin/sandcell-envd installed mode 0711 ($(stat -c %a "$agent" 2>&1))" \
	[ "$(stat -c %a "$agent" 2>/dev/null)" = 711 ]

# the installed broker, as a service manager starts it: no JUPYTER_PATH
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
envd_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u JUPYTER_PATH -u SANDCELL_PYTHON_STARTUP "$dest$prefix/bin/sandcell-broker" \
	--listen "127.0.0.1:$port" --envd-listen "127.0.0.1:$envd_port" --run-dir "$run_dir" \
	--no-default-context --pool 0 >>"$dest.log" 2>&1 &
broker=$!
langs=
for _ in $(seq 100); do
	langs=$(curl -s --max-time 1 "http://127.0.0.1:$port/languages") && [ -n "$langs" ] && break
	sleep 0.1
done
want="bash java"
[ -f "$dest$prefix/share/sandcell/jupyter/kernels/javascript/kernel.json" ] && want="$want javascript"
for l in $want; do
	check "the installed broker offers $l without JUPYTER_PATH (got: $langs)" \
		sh -c "echo '$langs' | grep -q '\"language\":\"$l\"'"
done
serves_openapi() {
	curl -s --max-time 5 "http://127.0.0.1:$port/openapi.json" | grep -q '^{"openapi":"3\.1\.'
}
check "the installed broker serves its OpenAPI document" serves_openapi
envd_up() {
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$envd_port/health")" = 204 ] && return 0
		sleep 0.1
	done
	return 1
}
check "the installed broker's envd agent runs in its box (GET /health 204)" envd_up

# as root, Python kernels are forked from the template it finds installed
if [ "$(id -u)" = 0 ]; then
	for _ in $(seq 600); do
		grep -q 'sandcell-template.* ready in' "$dest.log" && break
		sleep 0.1
	done
	check "the installed broker's Python template is ready ($(grep -o 'template: .*' "$dest.log" | head -n 1))" \
		grep -q 'sandcell-template.* ready in' "$dest.log"
	check "the installed template finds sandcell-init ($(grep 'sandcell-init' "$dest.log" | head -n 1))" \
		sh -c "! grep -q 'sandcell-init.*boxes keep a fork' '$dest.log'"
fi

# The unit's ExecStop, run as systemd would (a fake systemctl names the job):
# a restart leaves keep_contexts alone, a stop turns it off.
fake=$dest.fakebin
mkdir -p "$fake"
exec_stop() { # JOB_TYPE
	printf '#!/bin/sh\necho "42 sandcell.service %s running"\n' "$1" >"$fake/systemctl"
	chmod 755 "$fake/systemctl"
	python3 - "$unit" "$dest" <<'PY' >"$fake/exec-stop"
import shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
line = next(l for l in text.splitlines() if l.startswith("ExecStop="))
argv = shlex.split(line[len("ExecStop="):].replace("$$", "$"))
argv[-1] = argv[-1].replace("%s/" % "/opt/sc", "%s/opt/sc/" % sys.argv[2])
print(" ".join(shlex.quote(a) for a in argv))
PY
	PATH="$fake:$PATH" RUNTIME_DIRECTORY=$run_dir sh "$fake/exec-stop" >/dev/null
}
keep() { "$dest$prefix/bin/sandcellctl" --run-dir "$run_dir" --json status | grep -o '"keep_contexts": [a-z]*'; }
"$dest$prefix/bin/sandcellctl" --run-dir "$run_dir" stop-keeps-contexts >/dev/null
exec_stop restart
check "ExecStop on systemctl restart keeps contexts ($(keep))" [ "$(keep)" = '"keep_contexts": true' ]
exec_stop stop
check "ExecStop on systemctl stop ends contexts ($(keep))" [ "$(keep)" = '"keep_contexts": false' ]
rm -rf "$fake"

echo "install: $pass passed, $fail failed"
[ $fail -eq 0 ]
