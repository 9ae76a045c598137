#!/bin/sh
# Installs what `make test-image RUNTIME=docker` needs on the test host:
# Debian's Docker (docker.io: dockerd, the docker CLI, containerd and runc).
# The test starts a dockerd of its own (tests/deploy/docker.sh), never the
# system's. Not part of `make deps`: nothing else needs Docker. Idempotent.
set -eu

sh "$(dirname "$0")/apt-install.sh" docker-deps docker.io
