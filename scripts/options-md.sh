#!/bin/sh
# README.md's option table, from `sandcell-broker --help` (lib/opts.c prints
# each option as "  --name ARG   VARIABLE", its help indented, then
# "default: ..."). With --check README.md: exit 1 unless the README's table
# (the lines from its "| flag |" header to the table's end) is this one.
set -eu
bin=${1:?usage: options-md.sh BIN_DIR [--check README.md]}
table() {
	"$bin/sandcell-broker" --help 2>&1 | awk '
	# (| would end the cell; <word> would be read as HTML)
	function cell(s) { gsub(/\|/, "\\|", s); gsub(/</, "\\&lt;", s); return s }
	function flush() {
		if (opt != "")
			printf "| `%s` | `%s` | %s | %s |\n", cell(opt), var, cell(def), cell(help)
		opt = ""; help = ""; def = ""; indef = 0
	}
	BEGIN { print "| flag | variable | default | meaning |"; print "|---|---|---|---|" }
	/^  --/ {
		flush()
		var = $NF; opt = $1; if (NF == 3) opt = opt " " $2
		next
	}
	opt != "" && /^        default: / { sub(/^        default: /, ""); def = $0; indef = 1; next }
	opt != "" && /^        / {
		sub(/^        /, "")
		if (indef) def = def " " $0; else help = (help == "" ? $0 : help " " $0)
		next
	}
	END { flush() }'
}
if [ "${2:-}" = --check ]; then
	readme=${3:?--check takes README.md}
	got=$(awk '/^\| flag \| variable \|/ { t = 1 } t && !/^\|/ { exit } t' "$readme")
	if [ "$got" = "$(table)" ]; then
		echo "README option table: 1 passed, 0 failed"
	else
		table | diff -u --label "$readme" --label "sandcell-broker --help" \
			/dev/fd/3 - 3<<END || true
$got
END
		echo "README option table: 0 passed, 1 failed (scripts/options-md.sh $bin prints it)"
		exit 1
	fi
else
	table
fi
