#!/bin/sh
# Builds the image's Debian base (what debian:SUITE-slim is) from this
# machine's own apt sources, for hosts that reach a Debian mirror but no
# container registry: mmdebstrap minbase, docs and man pages left out as in
# the slim image, imported into podman as $1. No mirror is named here: the
# sources are the host's, read at build time, with the host's suite names
# (bookworm, bookworm-updates, bookworm-security) changed to SUITE's.
# Usage: image-base.sh IMAGE_NAME WORK_DIR [SUITE]   (SUITE: default the host's)
set -eu
name=$1
work=$2
. /etc/os-release
host=$VERSION_CODENAME
suite=${3:-$host}

if podman image exists "$name"; then
	exit 0
fi
sources=/etc/apt/sources.list.d/debian.sources
[ -r "$sources" ] || sources=/etc/apt/sources.list
mkdir -p "$work"
sed "s/\\b$host\\b/$suite/g" "$sources" >"$work/sources"
echo "image: building the base $name ($suite) from $sources (mmdebstrap)"
mmdebstrap --variant=minbase --quiet \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
	"$suite" "$work/base.tar" - <"$work/sources"
podman import --quiet --change 'CMD ["/bin/bash"]' "$work/base.tar" "$name" >/dev/null
rm -f "$work/base.tar"
