#!/bin/sh
# make test-image: runs the image sandcell:latest with podman as a pod would run
# it (its own network namespace, the address moved by SANDCELL_LISTEN, a
# read-only root with a writable /home/user and /tmp, uid 1000, no
# capabilities, no privilege escalation) and checks it from outside: one
# execution per language, the E2B SDK test against it, /ready before and
# during a drain, and `podman stop` ending it within the grace with exit
# status 0. Then as shipped, with podman's defaults: kernels boxed as uids of
# their own, and cells that kill everything (kill -9 -1, pkill -9 -f
# sandcell, os.killpg(0, 9), a fork bomb, rm -rf ~ /tmp/*) next to a busy
# context kill only their own. Prints "N passed, M failed".
#
# RUNTIME=docker runs the same image with Debian's Docker instead, from a
# dockerd of the test's own (tests/deploy/dockerd.sh: no iptables, no
# bridge, the host's network), three ways: as shipped with Docker's defaults
# (root, its default capabilities and seccomp profile: the box without
# namespaces), with deploy/docker/seccomp.json (the namespace box), and as
# a restricted pod runs (--user 1000 --cap-drop ALL --security-opt
# no-new-privileges: without namespaces, as the broker's uid). Each: /ready's
# level, a kernel that reads neither the access token nor the run dir nor
# reaches the control socket, another context's channels or the API, and
# the cells that kill everything next to a busy context. The image is
# podman's (`make image`), loaded into that dockerd.
#   RUNTIME           podman (default) or docker
#   PODMAN_RUN_FLAGS  default: Debian's runc, ulimits at or below the host's
set -u
cd "$(dirname "$0")/../.."
: "${PODMAN_RUN_FLAGS=--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096}"
RUNTIME=${RUNTIME:-podman}
case $RUNTIME in
podman) rt=podman ;;
docker)
	. tests/deploy/dockerd.sh
	rt=$DOCKER
	;;
*) echo "image_test: RUNTIME is podman or docker, not $RUNTIME" >&2; exit 2 ;;
esac
# SUITE=trixie: the image `make image SUITE=trixie` built
case ${SUITE:-bookworm} in
bookworm) image=${SANDCELL_IMAGE:-localhost/sandcell:latest} ;;
*) image=${SANDCELL_IMAGE:-localhost/sandcell:$SUITE} ;;
esac
grace=5
name=sandcell-test-$$
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
json="Content-Type: application/json" # the API takes JSON bodies only
auth="X-Sandcell-Test: 1"             # the access token's header, where the runs have one
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
notok() { failed=$((failed + 1)); echo "not ok - $1"; }
check() { # check NAME COMMAND...
	n=$1
	shift
	if "$@"; then ok "$n"; else notok "$n"; fi
}
cleanup() {
	if [ "$RUNTIME" = docker ]; then
		dockerd_stop
	else
		podman rm -f -t 0 "$name" >/dev/null 2>&1
	fi
	rm -f "/tmp/$name".*
}
trap cleanup EXIT INT TERM

# until /path answers STATUS or SECONDS pass
wait_status() {
	i=0
	while [ "$i" -lt $(($3 * 10)) ]; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url$1")" = "$2" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# body CODE [CONTEXT]: an /execute request's JSON
body() {
	python3 -c 'import json,sys; d={"code": sys.argv[1]}
if len(sys.argv) > 2: d["context_id"] = sys.argv[2]
print(json.dumps(d))' "$@"
}
# ctx: a new python context's id
ctx() {
	curl -s --max-time 90 -H "$json" -H "$auth" "$url/contexts" -d '{"language": "python"}' |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
# answers CONTEXT: its kernel prints 42 within 60 s (restarted, if a cell ended it)
answers() {
	i=0
	while [ "$i" -lt 60 ]; do
		curl -s --max-time 30 -H "$json" -H "$auth" "$url/execute" -d "$(body 'print(6*7)' "$1")" |
			grep -q '"type":"stdout","text":"42' && return 0
		sleep 1
		i=$((i + 1))
	done
	return 1
}

# cells_next_to_busy WHERE: cells that kill everything, in a context next to
# a busy one: each kills only its own; the server, the neighbour and the
# context itself go on. WHERE names the run in each check. (The bodies of
# this file's functions are not indented: their Python must not be.)
cells_next_to_busy() {
busy=$(ctx)
victim=$(ctx)
curl -s --max-time 200 -H "$json" -H "$auth" "$url/execute" -d "$(body 'import time
for i in range(240):
    print(i, flush=True)
    time.sleep(0.25)
print("done")' "$busy")" >"/tmp/$name.busy" &
bpid=$!
for cell in 'import os
try:
    os.kill(-1, 9)
except OSError as e:
    print(e)' "import subprocess
subprocess.run(['pkill', '-9', '-f', 'sandcell'])" "import subprocess
subprocess.run('kill -9 -1', shell=True)" 'import os
os.killpg(0, 9)' "import subprocess
try:
    subprocess.run(['bash', '-c', ':(){ :|:& };:'], timeout=5)
except Exception as e:
    print(e)" "import subprocess
subprocess.run('rm -rf ~ /tmp/*', shell=True)"; do
	what=$(echo "$cell" | tail -n 1 | sed 's/^ *//')
	case $cell in *":|:"*) what="a fork bomb" ;; *killpg*) what="os.killpg(0, 9)" ;; *os.kill*) what="os.kill(-1, 9)" ;; esac
	curl -s --max-time 60 -H "$json" -H "$auth" "$url/execute" -d "$(body "$cell" "$victim")" >/dev/null
	case $cell in *":|:"*) curl -s --max-time 60 -H "$auth" -X POST "$url/contexts/$victim/restart" >/dev/null ;; esac
	if [ "$($rt inspect -f '{{.State.Running}}' "$name")" = true ] &&
		wait_status /health 200 5 && answers "$victim"; then
		ok "$1: $what next to a busy context: the server serves, the context answers again"
	else
		notok "$1: $what next to a busy context: the server serves, the context answers again"
		$rt logs --tail 20 "$name" 2>&1
	fi
done
wait "$bpid"
if grep -q '"text":"239\\ndone' "/tmp/$name.busy" 2>/dev/null ||
	python3 -c 'import json,sys; t="".join(json.loads(l).get("text","") for l in open(sys.argv[1]) if l.strip()); sys.exit(not t.endswith("239\ndone\n"))' "/tmp/$name.busy"; then
	ok "$1: the busy neighbour ran to its end through all of it"
else
	notok "$1: the busy neighbour ran to its end: $(tail -c 300 "/tmp/$name.busy")"
fi
}

# podman_runs: as a pod would run it, then with podman's defaults, then with
# an unmasked /proc
podman_runs() {
# shellcheck disable=SC2086 # PODMAN_RUN_FLAGS is a list of flags
podman run -d --name "$name" $PODMAN_RUN_FLAGS --read-only --cap-drop ALL --user 1000 \
	--security-opt no-new-privileges --tmpfs /home/user:rw,mode=0755,U \
	-p "127.0.0.1:$port:5000" -e SANDCELL_LISTEN=0.0.0.0:5000 "$image" --grace "$grace" \
	>/dev/null || { notok "podman run $image"; echo "$passed passed, $failed failed"; exit 1; }
if wait_status /health 200 60; then
	ok "the container answers /health"
else
	notok "the container answers /health on SANDCELL_LISTEN's port 5000 (the broker says: $(podman logs "$name" 2>&1 | grep -m 1 -o 'listening on [^ ]*'))"
	podman logs --tail 20 "$name" 2>&1
	echo "$passed passed, $failed failed"
	exit 1
fi
check "/ready is 200 once the default contexts answer" wait_status /ready 200 120
check "SANDCELL_LISTEN moved the address" \
	sh -c "podman logs '$name' 2>&1 | grep -q 'listening on http://0.0.0.0:5000 '"
check "runs as the unprivileged user (uid 1000)" \
	[ "$(podman exec "$name" id -u)" = 1000 ]
check "PID 1 is tini" [ "$(podman exec "$name" cat /proc/1/comm)" = tini ]

for pair in "python:print(6*7)" "javascript:console.log(6*7)" "typescript:console.log(6*7 as number)" \
	"r:cat(6*7)" "bash:echo \$((6*7))" "java:System.out.println(6*7);"; do
	lang=${pair%%:*}
	code=${pair#*:}
	body=$(python3 -c 'import json,sys; print(json.dumps({"language": sys.argv[1], "code": sys.argv[2]}))' "$lang" "$code")
	out=$(curl -s --max-time 90 -H "$json" "$url/execute" -d "$body")
	if echo "$out" | grep -q '"type":"stdout","text":"42'; then
		ok "$lang runs in the image"
	else
		notok "$lang runs in the image: $(echo "$out" | head -c 300)"
	fi
done

# the data stack imports (scipy without python3-pythran: see the Containerfile)
code='import numpy, pandas, scipy.interpolate, scipy.stats, sklearn.linear_model, seaborn, sympy, plotly, openpyxl, xlrd, bs4, requests, PIL\nx = numpy.random.rand(20, 2)\nscipy.interpolate.RBFInterpolator(x, x[:, 0])(x[:2])\nprint(6*7)'
out=$(curl -s --max-time 90 -H "$json" "$url/execute" -d "{\"code\": \"$code\"}")
if echo "$out" | grep -q '"type":"stdout","text":"42'; then
	ok "the python data stack imports and runs"
else
	notok "the python data stack imports and runs: $(echo "$out" | head -c 600)"
fi

if (cd tests/sdk && SANDCELL_URL="http://localhost:$port" node sdk_test.mjs >"/tmp/$name.sdk" 2>&1); then
	ok "E2B SDK test against the container: $(tail -n 1 "/tmp/$name.sdk")"
else
	notok "E2B SDK test against the container"
	grep -v '^ok' "/tmp/$name.sdk"
fi

# A drain: a running execution finishes, /ready turns 503, the broker exits 0.
curl -s --max-time 60 -H "$json" "$url/execute" \
	-d '{"code": "import time\ntime.sleep(3)\nprint(\"drained\")"}' >"/tmp/$name.run" &
run=$!
sleep 0.5
start=$(date +%s%N)
podman stop -t $((grace + 20)) "$name" >/dev/null 2>&1 &
stop=$!
check "/ready is 503 during the drain" wait_status /ready 503 5
check "/health stays 200 during the drain" wait_status /health 200 1
wait "$stop"
took=$((($(date +%s%N) - start) / 1000000))
wait "$run"
check "the running execution finished during the drain" grep -q '"text":"drained' "/tmp/$name.run"
code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
check "podman stop ended it in ${took} ms (grace ${grace} s)" [ "$took" -lt $((grace * 1000)) ]
check "exit status 0 after a drain (got $code)" [ "$code" = 0 ]

# Past the grace: an execution longer than it is cut, and the exit is still 0.
podman start "$name" >/dev/null
wait_status /ready 200 120 || notok "restarted container becomes ready"
curl -s --max-time 60 -H "$json" "$url/execute" -d '{"code": "import time\ntime.sleep(60)"}' \
	>"/tmp/$name.long" &
run=$!
sleep 0.5
start=$(date +%s%N)
podman stop -t $((grace + 20)) "$name" >/dev/null 2>&1
took=$((($(date +%s%N) - start) / 1000000))
wait "$run"
code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
check "work past the grace: stopped in ${took} ms, within ${grace} s + 2 s" \
	[ "$took" -ge $((grace * 1000)) -a "$took" -lt $((grace * 1000 + 2000)) ]
check "work past the grace: exit status 0 (got $code)" [ "$code" = 0 ]
check "work past the grace: the stream says ServerStopping" grep -q ServerStopping "/tmp/$name.long"

[ "$failed" -eq 0 ] || podman logs --tail 40 "$name" 2>&1

# As shipped, with podman's defaults: root in the container without
# CAP_SYS_ADMIN, a masked /proc, no /dev/net/tun. The broker boxes kernels
# from a user namespace of its own, as uids of their own; /ready says so.
podman rm -f -t 0 "$name" >/dev/null 2>&1
# shellcheck disable=SC2086 # PODMAN_RUN_FLAGS is a list of flags
podman run -d --name "$name" $PODMAN_RUN_FLAGS -p "127.0.0.1:$port:49999" "$image" >/dev/null ||
	notok "podman run $image with podman's defaults"
if wait_status /ready 200 120; then
	ok "with podman's defaults the container becomes ready"
else
	notok "with podman's defaults the container becomes ready"
	podman logs --tail 30 "$name" 2>&1
fi
curl -s --max-time 5 "$url/ready" >"/tmp/$name.ready"
check "with podman's defaults /ready says the box is reduced, from its own user namespace, and why: $(cat "/tmp/$name.ready")" \
	python3 -c 'import json,sys
s = json.load(open(sys.argv[1]))["sandbox"]
w = " ".join(m["what"] for m in s["missing"])
sys.exit(not (s["level"] == "reduced" and s["own_user_namespace"] and "/proc" in w and "outbound" in w))' "/tmp/$name.ready"
code='import os
st = dict(l.split(":\t") for l in open("/proc/self/status").read().splitlines())
u = os.getuid()
open(os.path.expanduser("~/mine"), "w").write("x")
print(61184 <= u <= 65519, st["CapEff"], st["NoNewPrivs"], st["Seccomp"], os.listdir("/proc/1"), os.path.exists("/tmp/sandcell-0"))'
out=$(curl -s --max-time 90 -H "$json" "$url/execute" -d "$(body "$code")")
if echo "$out" | grep -q '"text":"True 0000000000000000 1 2 \[\] False'; then
	ok "with podman's defaults a kernel runs as a uid of its own, no capabilities, no_new_privs, seccomp, the container's processes and the run dir out of sight, and writes its workspace"
else
	notok "with podman's defaults a kernel is boxed: $(echo "$out" | head -c 400)"
fi

cells_next_to_busy "with podman's defaults"

# With an unmasked /proc (podman's systempaths=unconfined) the box has a
# /proc of its own, and /ready no longer lists it as missing.
podman rm -f -t 0 "$name" >/dev/null 2>&1
# shellcheck disable=SC2086 # PODMAN_RUN_FLAGS is a list of flags
podman run -d --name "$name" $PODMAN_RUN_FLAGS --security-opt systempaths=unconfined \
	-p "127.0.0.1:$port:49999" "$image" >/dev/null
wait_status /ready 200 120 || notok "the container with systempaths=unconfined becomes ready"
code='import os
print(len([p for p in os.listdir("/proc") if p.isdigit()]) < 10, os.getppid())'
out=$(curl -s --max-time 90 -H "$json" "$url/execute" -d "$(body "$code")")
ready=$(curl -s --max-time 5 "$url/ready")
if echo "$out" | grep -q '"text":"True 1' && ! echo "$ready" | grep -q '/proc'; then
	ok "with systempaths=unconfined a box has a /proc of its own"
else
	notok "with systempaths=unconfined a box has a /proc of its own: $(echo "$out" | head -c 300) $ready"
	podman logs --tail 20 "$name" 2>&1
fi
}

# docker_boxed WHERE RUN_DIR NEIGHBOUR UID_TEST: a kernel of the run WHERE
# runs as the uid UID_TEST accepts (a shell test of $u), with no_new_privs
# and seccomp; reads neither the access token nor the run dir; its
# connection to the control socket is closed at once; it connects to no
# abstract socket of another context's (the neighbour's kernel channels,
# listed in /proc/net/unix) and the API refuses it.
docker_boxed() {
	code="import os, socket, urllib.request
st = dict(l.split(':\t') for l in open('/proc/self/status').read().splitlines())
res = []
for p in ('$2', '/var/lib/sandcell/token'):
    try:
        os.listdir(p) if os.path.isdir(p) else open(p).read()
        res.append('read:' + p)
    except OSError as e:
        pass
s = socket.socket(socket.AF_UNIX)
s.settimeout(3)
try:
    s.connect('$2/ctl.sock')
    s.send(b'\x00SP\x00\x00\x11\x00\x00')  # pair1's handshake, as sandcellctl's
    while s.recv(64):
        pass
except socket.timeout:
    res.append('control socket kept open')
except OSError:
    pass
mine = set()
for f in os.listdir('/proc/self/fd'):
    try:
        mine.add(os.readlink('/proc/self/fd/' + f))
    except OSError:
        pass
reached = 0
for l in open('/proc/net/unix').read().splitlines()[1:]:
    f = l.split()
    if len(f) > 7 and f[7].startswith('@') and f[5] == '01' and 'socket:[%s]' % f[6] not in mine:
        c = socket.socket(socket.AF_UNIX)
        try:
            c.connect('\0' + f[7][1:])
            reached += 1
        except OSError:
            pass
        c.close()
if reached:
    res.append('%d abstract sockets of others reached' % reached)
try:
    urllib.request.urlopen('$url/contexts', timeout=5)
    res.append('the API answered')
except urllib.error.HTTPError as e:
    if e.code != 403:
        res.append('the API answered %d' % e.code)
except OSError:
    pass
print('box', os.getuid(), st['NoNewPrivs'], st['Seccomp'], 'refused:', ' '.join(res) or 'all')"
	out=$(curl -s --max-time 90 -H "$json" -H "$auth" "$url/execute" -d "$(body "$code")")
	t=$(printf '%s\n' "$out" | python3 -c 'import json,sys
print("".join(json.loads(l).get("text", "") for l in sys.stdin if l.strip()).strip())' 2>/dev/null)
	u=$(printf '%s\n' "$t" | awk '$1 == "box" {print $2}')
	if printf '%s\n' "$t" | grep -q '^box [0-9]* 1 2 refused: all$' && eval "$4"; then
		ok "$1: a kernel runs as uid $u, no_new_privs, seccomp; reads neither the token nor the run dir, the control socket closes on it, no other context's channel and no API answer it"
	else
		notok "$1: a kernel is boxed: ${t:-$(echo "$out" | head -c 400)}"
	fi
}

# docker_run WHERE LEVEL RUN_DIR UID_TEST FLAGS...: the image run by our
# dockerd with the host's network and FLAGS, an access token in a file of
# the run's uid (0600); /ready's level is LEVEL ("reduced without
# namespaces", "reduced with namespaces"); then docker_boxed and the
# kill-everything cells.
docker_run() {
	where=$1 level=$2 rd=$3 uidtest=$4
	shift 4
	"$rt" rm -f "$name" >/dev/null 2>&1
	if ! "$rt" run -d --name "$name" --network host \
		-v "/tmp/$name.token:/var/lib/sandcell/token:ro" \
		-e SANDCELL_ACCESS_TOKEN_FILE=/var/lib/sandcell/token \
		-e SANDCELL_LISTEN="127.0.0.1:$port" -e SANDCELL_ENVD_LISTEN=none \
		"$@" "$image" >/dev/null; then
		notok "$where: docker run $*"
		return
	fi
	if wait_status /ready 200 120; then
		ok "$where: the container becomes ready"
	else
		notok "$where: the container becomes ready"
		"$rt" logs --tail 30 "$name" 2>&1
		return
	fi
	curl -s --max-time 5 "$url/ready" >"/tmp/$name.ready"
	check "$where: /ready says $level: $(head -c 300 "/tmp/$name.ready")..." \
		python3 -c 'import json,sys
s = json.load(open(sys.argv[1]))["sandbox"]
want = sys.argv[2]
has = "reduced with namespaces" if s["namespaces"] else "reduced without namespaces"
sys.exit(not (s["level"] == "reduced" and has == want and s["missing"]))' "/tmp/$name.ready" "$level"
	neighbour=$(ctx)
	docker_boxed "$where" "$rd" "$neighbour" "$uidtest"
	out=$(curl -s --max-time 90 -H "$json" -H "$auth" "$url/execute" \
		-d '{"language": "javascript", "code": "console.log(6*7)"}')
	if printf '%s\n' "$out" | grep -q '"type":"stdout","text":"42'; then
		ok "$where: javascript (Deno) runs in its box"
	else
		notok "$where: javascript (Deno) runs in its box: $(printf '%s' "$out" | head -c 300)"
	fi
	cells_next_to_busy "$where"
	if [ "$failed" -ne 0 ]; then "$rt" logs --tail 40 "$name" 2>&1 | grep -v ' info: '; fi
	"$rt" rm -f "$name" >/dev/null 2>&1
}

# docker_runs: our own dockerd, the image loaded into it, the three runs and
# the capabilities deploy/kubernetes/sandboxtemplate-boxed.yaml gives
docker_runs() {
	if ! dockerd_start; then
		notok "a dockerd of our own starts"
		return
	fi
	ok "a dockerd of our own starts (no iptables, no bridge, $DOCKER_HOST)"
	if ! podman save "$image" 2>/dev/null | "$rt" load -q >/dev/null; then
		notok "the image $image loads into it (podman save | docker load)"
		return
	fi
	ok "the image $image loads into it"
	token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	printf '%s\n' "$token" >"/tmp/$name.token"
	auth="X-Access-Token: $token"
	chmod 600 "/tmp/$name.token"
	docker_run "with Docker's defaults" "reduced without namespaces" /tmp/sandcell-0 \
		'[ "$u" -ge 61184 ] && [ "$u" -le 65519 ]'
	docker_run "with deploy/docker/seccomp.json" "reduced with namespaces" /tmp/sandcell-0 \
		'[ "$u" -ge 61184 ] && [ "$u" -le 65519 ]' \
		--security-opt "seccomp=$PWD/deploy/docker/seccomp.json"
	docker_run "as the boxed Kubernetes template runs (deploy/docker/seccomp.json, a few capabilities, read-only root)" \
		"reduced with namespaces" /tmp/sandcell-0 '[ "$u" -ge 61184 ] && [ "$u" -le 65519 ]' \
		--security-opt "seccomp=$PWD/deploy/docker/seccomp.json" --security-opt no-new-privileges \
		--cap-drop ALL --cap-add SETUID --cap-add SETGID --cap-add SETFCAP --cap-add CHOWN --cap-add DAC_OVERRIDE \
		--cap-add FOWNER --cap-add SETPCAP --cap-add KILL \
		--read-only --tmpfs /tmp:rw,exec,size=2g --tmpfs /home/user:rw,exec --tmpfs /var/tmp
	chown 1000:1000 "/tmp/$name.token"
	docker_run "as a restricted pod (--user 1000 --cap-drop ALL, no-new-privileges)" \
		"reduced without namespaces" /tmp/sandcell-1000 '[ "$u" = 1000 ]' \
		--user 1000 --cap-drop ALL --security-opt no-new-privileges
}

case $RUNTIME in
podman) podman_runs ;;
docker) docker_runs ;;
esac

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
