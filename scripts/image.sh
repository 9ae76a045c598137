#!/bin/sh
# `make image`: builds the OCI image sandcell:VERSION and sandcell:latest with
# podman from deploy/Containerfile. The binaries are those just built on this
# (Debian 12) host, staged by `make install` with the kernelspecs, the start-up
# profile and Deno (from `make deps`) as the build context.
#   SANDCELL_IMAGE_BASE  the base image (default debian:bookworm-slim, pulled
#                        if need be; when no registry answers, the same base
#                        built from the host's apt sources by image-base.sh)
#   PODMAN_FLAGS         flags for podman build and run (default: Debian's
#                        runc, the host network, ulimits at or below the host's)
set -eu
cd "$(dirname "$0")/.."
sh scripts/image-deps.sh
# The binaries are built here and run on the image's Debian 12 libraries.
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
	{ echo "image: build on Debian 12 (bookworm), not ${PRETTY_NAME:-this system}" >&2; exit 1; }

version=$(sed -n 's/^#define SANDCELL_VERSION "\(.*\)"$/\1/p' proto/proto.h)
base=${SANDCELL_IMAGE_BASE:-}
if [ -z "$base" ]; then
	base=docker.io/library/debian:bookworm-slim
	local_base=localhost/sandcell-base:bookworm
	if podman image exists "$base"; then
		:
	elif podman image exists "$local_base"; then
		base=$local_base # built here before: no registry answered then
	elif ! timeout 300 podman pull -q "$base" >/dev/null; then
		echo "image: no registry answers; building the base from this machine's apt sources"
		base=$local_base
		sh scripts/image-base.sh "$base" build/image
	fi
fi
: "${PODMAN_FLAGS=--runtime runc --network host --ulimit nofile=1024:1024 --ulimit nproc=4096:4096}"

ctx=build/image/context
rm -rf "$ctx"
mkdir -p "$ctx"
make --no-print-directory install DESTDIR="$PWD/$ctx/rootfs" PREFIX=/usr/local >/dev/null
deno=$ctx/rootfs/usr/local/lib/sandcell/deno
[ -x "$deno" ] || { echo "image: no Deno binary: run make deps first" >&2; exit 1; }
mv "$deno" "$ctx/deno"
rm -rf "$ctx/rootfs/etc" # the systemd units: not used in a container
find "$ctx/rootfs" -name __pycache__ -prune -exec rm -rf {} +

echo "image: building sandcell:$version from $base"
# shellcheck disable=SC2086 # PODMAN_FLAGS is a list of flags
podman build $PODMAN_FLAGS --build-arg BASE="$base" --build-arg VERSION="$version" \
	-t "localhost/sandcell:$version" -t localhost/sandcell:latest \
	-f deploy/Containerfile "$ctx"
# every library the binaries link is in the image
# shellcheck disable=SC2086
missing=$(podman run --rm $PODMAN_FLAGS --entrypoint sh "localhost/sandcell:$version" -c \
	'ldd /usr/local/bin/sandcell-* | grep "not found"' || true)
[ -z "$missing" ] || { echo "image: libraries missing in the image:" >&2; echo "$missing" >&2; exit 1; }
podman image inspect --format 'image: {{index .RepoTags 0}}, {{.Size}} bytes' \
	"localhost/sandcell:$version"
