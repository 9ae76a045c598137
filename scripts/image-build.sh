#!/bin/sh
# Builds sandcell in a container of the image's base, for a suite other than
# the host's (image.sh), and stages it as image.sh does on the host:
# /out/rootfs (make install) and /out/libs (image-libs.sh). /src is the
# checkout (read-only), /deno Deno's npm folder from `make deps`.
set -eu
echo "image: building the binaries on $(. /etc/os-release && echo "$PRETTY_NAME")"
apt-get update -qq
# shellcheck disable=SC2046 # one package per word
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	$(sed 's/#.*//' /src/scripts/build-packages) python3 >/dev/null
mkdir /build
tar -C /src --exclude=./.git --exclude=./build --exclude=./bin --exclude=./.deps -cf - . |
	tar -C /build -xf -
cd /build
mkdir -p .deps
ln -s /deno .deps/deno
make -j"$(nproc)" all PYTHON=/usr/bin/python3 >/dev/null
make --no-print-directory install DESTDIR=/out/rootfs PREFIX=/usr/local >/dev/null
sh scripts/image-libs.sh /out/rootfs >/out/libs
