#!/bin/sh
# `make image`: builds the OCI image sandcell:VERSION and sandcell:latest with
# podman from deploy/Containerfile, on Debian 12 (bookworm). `make image
# SUITE=trixie` builds the same image on Debian 13 as sandcell:VERSION-trixie
# and sandcell:trixie. Binaries, kernelspecs and the start-up profile are
# staged by `make install` as the build context, with Deno (from `make deps`).
# On the host's own suite they are built here; on another they are built in a
# container of that suite's base (scripts/image-build.sh), so that they link
# the libraries the image has. The image's libraries for them are the Debian
# packages that hold what the binaries link (ldd and dpkg -S where they were
# built), passed to the Containerfile.
#   SUITE                bookworm (default) or trixie
#   SANDCELL_IMAGE_BASE  the base image (default debian:SUITE-slim, pulled
#                        if need be; when no registry answers, the same base
#                        built from the host's apt sources by image-base.sh)
#   PODMAN_FLAGS         flags for podman build and run (default: Debian's
#                        runc, the host network, ulimits at or below the host's)
set -eu
cd "$(dirname "$0")/.."
sh scripts/image-deps.sh
. /etc/os-release
suite=${SUITE:-bookworm}
case $suite in
bookworm | trixie) ;;
*) echo "image: SUITE is bookworm or trixie, not $suite" >&2; exit 1 ;;
esac
[ "${VERSION_CODENAME:-}" = bookworm ] ||
	{ echo "image: build on Debian 12 (bookworm), not ${PRETTY_NAME:-this system}" >&2; exit 1; }

version=$(sed -n 's/^#define SANDCELL_VERSION "\(.*\)"$/\1/p' proto/proto.h)
tag=$version
latest=latest
[ "$suite" = bookworm ] || { tag=$version-$suite; latest=$suite; }
base=${SANDCELL_IMAGE_BASE:-}
if [ -z "$base" ]; then
	base=docker.io/library/debian:$suite-slim
	local_base=localhost/sandcell-base:$suite
	if podman image exists "$base"; then
		:
	elif podman image exists "$local_base"; then
		base=$local_base # built here before: no registry answered then
	elif ! timeout 300 podman pull -q "$base" >/dev/null; then
		echo "image: no registry answers; building the base from this machine's apt sources"
		base=$local_base
		sh scripts/image-base.sh "$base" build/image "$suite"
	fi
fi
: "${PODMAN_FLAGS=--runtime runc --network host --ulimit nofile=1024:1024 --ulimit nproc=4096:4096}"

ctx=build/image/context
rm -rf "$ctx"
mkdir -p "$ctx"
if [ "$suite" = "$VERSION_CODENAME" ]; then
	make --no-print-directory install DESTDIR="$PWD/$ctx/rootfs" PREFIX=/usr/local >/dev/null
	sh scripts/image-libs.sh "$ctx/rootfs" >"$ctx/libs"
else
	# shellcheck disable=SC2086 # PODMAN_FLAGS is a list of flags
	podman run --rm $PODMAN_FLAGS -v "$PWD:/src:ro" -v "$PWD/$ctx:/out" \
		-v "$(cd .deps/deno && pwd):/deno:ro" "$base" sh /src/scripts/image-build.sh
fi
deno=$ctx/rootfs/usr/local/lib/sandcell/deno
[ -x "$deno" ] || { echo "image: no Deno binary: run make deps first" >&2; exit 1; }
mv "$deno" "$ctx/deno"
rm -rf "$ctx/rootfs/etc" # the systemd units: not used in a container
find "$ctx/rootfs" -name __pycache__ -prune -exec rm -rf {} +

echo "image: building sandcell:$tag from $base (libraries: $(tr '\n' ' ' <"$ctx/libs"))"
# shellcheck disable=SC2086 # PODMAN_FLAGS is a list of flags
podman build $PODMAN_FLAGS --build-arg BASE="$base" --build-arg VERSION="$version" \
	--build-arg LIBS="$(tr '\n' ' ' <"$ctx/libs")" \
	-t "localhost/sandcell:$tag" -t "localhost/sandcell:$latest" \
	-f deploy/Containerfile "$ctx"
# every library the binaries link is in the image
# shellcheck disable=SC2086
missing=$(podman run --rm $PODMAN_FLAGS --entrypoint sh "localhost/sandcell:$tag" -c \
	'ldd /usr/local/bin/sandcell-* | grep "not found"' || true)
[ -z "$missing" ] || { echo "image: libraries missing in the image:" >&2; echo "$missing" >&2; exit 1; }
podman image inspect --format 'image: {{index .RepoTags 0}}, {{.Size}} bytes' \
	"localhost/sandcell:$tag"
