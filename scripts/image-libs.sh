#!/bin/sh
# Prints the Debian packages that hold the shared libraries sandcell's
# installed binaries link (under ROOTFS), one per line: what the image
# installs for them. Run where the binaries were built.
# Usage: image-libs.sh ROOTFS
set -eu
libs=$(for f in "$1"/usr/local/bin/sandcell-* "$1"/usr/local/lib/sandcell/*; do
	[ -f "$f" ] && ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u)
for lib in $libs; do
	# usrmerge: the package may name /lib/... or /usr/lib/...
	dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null ||
		{ echo "image: no package holds $lib" >&2; exit 1; }
done | cut -d: -f1 | sort -u
