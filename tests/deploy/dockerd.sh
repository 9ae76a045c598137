#!/bin/sh
# Sourced by image_test.sh under RUNTIME=docker: a dockerd of the test's own,
# from Debian's docker.io (scripts/docker-deps.sh), never the system's: no
# iptables, no bridge (containers run with the host's network), its data
# root, exec root, pid file and API socket under a temporary directory, which
# dockerd_stop removes. DOCKER_HOST names its socket; the docker CLI is
# Debian's, by absolute path (another `docker` may come first on PATH).
DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd
dockerd_dir=""

# dockerd_start: 0 once the daemon answers (within 60 s), else 1
dockerd_start() {
	[ -x "$DOCKERD" ] && [ -x "$DOCKER" ] ||
		{ echo "no Debian docker.io here: run sh scripts/docker-deps.sh" >&2; return 1; }
	dockerd_dir=$(mktemp -d /tmp/sandcell-dockerd.XXXXXX)
	DOCKER_HOST=unix://$dockerd_dir/docker.sock
	export DOCKER_HOST
	setsid "$DOCKERD" --iptables=false --ip6tables=false --bridge=none --ip-forward=false \
		--ip-masq=false --data-root "$dockerd_dir/data" --exec-root "$dockerd_dir/exec" \
		--pidfile "$dockerd_dir/dockerd.pid" -H "$DOCKER_HOST" >"$dockerd_dir/log" 2>&1 &
	dockerd_pid=$!
	i=0
	while [ "$i" -lt 600 ]; do
		"$DOCKER" version >/dev/null 2>&1 && return 0
		kill -0 "$dockerd_pid" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "dockerd did not start:" >&2
	tail -n 20 "$dockerd_dir/log" >&2
	return 1
}

# dockerd_stop: its containers removed, the daemon (and the containerd it
# started) ended, its directory gone; safe to call twice or unstarted
dockerd_stop() {
	[ -n "$dockerd_dir" ] || return 0
	"$DOCKER" ps -aq 2>/dev/null | xargs -r "$DOCKER" rm -f >/dev/null 2>&1
	if [ -n "${dockerd_pid:-}" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
		kill -TERM "$dockerd_pid"
		i=0
		while kill -0 "$dockerd_pid" 2>/dev/null && [ "$i" -lt 300 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -KILL "$dockerd_pid" 2>/dev/null
	fi
	# what dockerd left mounted under its roots (overlays, its netns files)
	grep -o " $dockerd_dir[^ ]*" /proc/self/mounts | sort -r | xargs -r -n 1 umount -l 2>/dev/null
	rm -rf "$dockerd_dir"
	dockerd_dir=""
}
