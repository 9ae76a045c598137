#!/bin/sh
# Installs what `make image` and `make test-image` need on the build host:
# podman with Debian's runc (crun refuses a hybrid cgroup layout), mmdebstrap
# to build the Debian base when no registry is reachable. Idempotent.
set -eu

sh "$(dirname "$0")/apt-install.sh" image-deps podman runc mmdebstrap uidmap
