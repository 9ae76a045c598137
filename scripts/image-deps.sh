#!/bin/sh
# Installs what `make image` and `make test-image` need on the build host:
# podman with Debian's runc (crun refuses a hybrid cgroup layout), mmdebstrap
# to build the Debian base when no registry is reachable. Idempotent.
set -eu

PKGS="podman runc mmdebstrap uidmap"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "image-deps: installing$missing"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
		--no-install-recommends $missing
fi
