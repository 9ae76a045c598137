#!/bin/sh
# Writes the javascript and typescript kernelspecs for Deno's Jupyter kernel.
# Usage: deno-kernelspecs.sh DENO_BINARY JUPYTER_DATA_DIR
# Deno speaks TCP only and is interrupted by message (SIGINT would kill it).
set -eu
deno=$1
out=$2
for lang in javascript typescript; do
	mkdir -p "$out/kernels/$lang"
	cat >"$out/kernels/$lang/kernel.json.tmp" <<JSON
{
 "argv": ["$deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
 "display_name": "Deno ($lang)",
 "language": "$lang",
 "interrupt_mode": "message",
 "env": {"NO_COLOR": "1"},
 "metadata": {"sandcell": {"transport": "tcp"}}
}
JSON
	mv "$out/kernels/$lang/kernel.json.tmp" "$out/kernels/$lang/kernel.json"
done
