#!/bin/sh
# apt-install.sh WHO PKG... — installs those of the Debian packages that are
# missing (--no-install-recommends keeps kernels small), saying so as WHO;
# waits for another apt's lock rather than failing. Every install step of the
# tree (deps.sh, image-deps.sh, tests/fuzz/run.sh) goes through it.
set -eu
who=$1
shift
missing=""
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -n "$missing" ] || exit 0
echo "$who: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
# shellcheck disable=SC2086 # a list of package names
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
	--no-install-recommends $missing
