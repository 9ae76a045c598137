#!/bin/sh
# run.sh — builds the libFuzzer targets (clang, ASan+UBSan) into build/fuzz/
# and runs each for FUZZ_SECONDS (default 60) on a copy of its seed corpus, so
# tests/fuzz/corpus is never written to. Crashes go to build/fuzz/crashes/NAME/;
# the exit status is non-zero if any target found one.
#   tests/fuzz/run.sh               build, then fuzz msg, http, wire and zmtp
#   tests/fuzz/run.sh wire http     only these targets
#   tests/fuzz/run.sh build         build only
#   tests/fuzz/run.sh seeds         rewrite tests/fuzz/corpus from seeds.c
set -u
cd "$(dirname "$0")/../.."

SECS=${FUZZ_SECONDS:-60}
OUT=build/fuzz
OBJ=$OUT/obj
CC_FUZZ=${CC_FUZZ:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS_FUZZ="-O1 -g -D_GNU_SOURCE -std=gnu11 -Wall -Wextra -Werror $SAN"
LIBS="-lmicrohttpd -lzmq -lnng -lmsgpackc -ljansson -lcjson -lsodium -lseccomp -lnftables -lnftnl -lmnl -lpthread"

# clang and libFuzzer's runtime (Debian 12: clang 14), installed if missing.
deps() {
	sh scripts/apt-install.sh fuzz clang libclang-rt-14-dev
}

# Compiles one project source with coverage instrumentation (not libFuzzer's
# main), unless its object is newer than it and every header.
obj() {
	src=$1
	o=$OBJ/${src%.c}.o
	if [ -f "$o" ] && [ "$o" -nt "$src" ] && [ "$o" -nt proto/proto.h ] && [ "$o" -nt lib/lib.h ] &&
		[ "$o" -nt proxy/proxy.h ] && [ "$o" -nt broker/broker.h ]; then
		echo "$o"
		return 0
	fi
	mkdir -p "$(dirname "$o")"
	$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer-no-link -c -o "$o" "$src" >&2 || return 1
	echo "$o"
}

objs() {
	for s in "$@"; do obj "$s" || return 1; done
}

build() {
	deps || { echo "fuzz: cannot install clang and libclang-rt-14-dev" >&2; return 1; }
	mkdir -p "$OUT"
	proto=$(objs proto/*.c lib/*.c) || return 1
	broker=$(objs $(ls broker/*.c | grep -v -e broker/main.c)) ||
		return 1
	proxy=$(objs $(ls proxy/*.c | grep -v -e proxy/main.c -e proxy/init.c)) || return 1
	echo "fuzz: building $OUT/fuzz_msg $OUT/fuzz_http $OUT/fuzz_wire $OUT/fuzz_zmtp $OUT/seeds"
	$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer -o $OUT/fuzz_msg tests/fuzz/fuzz_msg.c $proto \
		$LIBS &&
		$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer -o $OUT/fuzz_http tests/fuzz/fuzz_http.c \
			$broker $proto $LIBS &&
		$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer -o $OUT/fuzz_wire tests/fuzz/fuzz_wire.c \
			$proxy $proto $LIBS &&
		$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer -o $OUT/fuzz_zmtp tests/fuzz/fuzz_zmtp.c \
			$proxy $proto $LIBS &&
		$CC_FUZZ $CFLAGS_FUZZ -fsanitize=fuzzer-no-link -o $OUT/seeds tests/fuzz/seeds.c \
			$broker $OBJ/proxy/wire.o $OBJ/proxy/zmtp.o $proto $LIBS
}

# Largest input per target: a frame, a body, a multipart message.
max_len() {
	case $1 in
	msg) echo 4096 ;;
	http) echo 8192 ;;
	wire) echo 16384 ;;
	zmtp) echo 16384 ;;
	esac
}

# The last libFuzzer status line's value for a key ("cov", "ft", "corp").
status_field() {
	grep -E '^#[0-9]+' "$1" | tail -n 1 | sed -n "s/.* $2: \([^ ]*\).*/\1/p"
}

fuzz() {
	name=$1
	corpus=$OUT/corpus-$name
	crashes=$OUT/crashes/$name
	log=$OUT/$name.log
	dict=""
	rm -rf "$corpus"
	mkdir -p "$corpus" "$crashes"
	if ! cp tests/fuzz/corpus/$name/* "$corpus"/; then
		echo "fuzz: no seeds in tests/fuzz/corpus/$name" >&2
		exit 1
	fi
	if [ -d tests/fuzz/regressions/$name ]; then
		cp tests/fuzz/regressions/$name/* "$corpus"/ 2>/dev/null
	fi
	[ -f tests/fuzz/$name.dict ] && dict="-dict=tests/fuzz/$name.dict"
	seeds=$(ls "$corpus" | wc -l)
	stamp=$OUT/.stamp-$name
	touch "$stamp"
	echo "== fuzz_$name: ${SECS}s, $seeds seeds, log $log"
	start=$(date +%s)
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$OUT/fuzz_$name -max_total_time="$SECS" -max_len="$(max_len "$name")" \
		-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$crashes/" $dict "$corpus" >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - start))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	[ -n "$execs" ] || execs=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed 's/^#\([0-9]*\).*/\1/')
	found=$(find "$crashes" -type f -newer "$stamp" | sort)
	rm -f "$stamp"
	verdict="no crash"
	if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
		verdict="CRASH (exit $rc): ${found:-see $log}"
		failed=1
		grep -E -A40 '^==[0-9]+==ERROR|runtime error|fuzz invariant|deadly signal' "$log" |
			head -n 60
	fi
	line=$(printf '%-10s %6s %10s %6s %7s %8s  %s' "fuzz_$name" "$secs" "${execs:-?}" \
		"$(status_field "$log" cov)" "$(status_field "$log" ft)" \
		"$(ls "$corpus" | wc -l)" "$verdict")
	summary="$summary
$line"
}

case "${1:-}" in
seeds)
	build || exit 1
	rm -rf tests/fuzz/corpus/msg tests/fuzz/corpus/http tests/fuzz/corpus/wire \
		tests/fuzz/corpus/zmtp
	exec $OUT/seeds tests/fuzz/corpus
	;;
build)
	build
	exit $?
	;;
esac

build || exit 1
targets=${*:-msg http wire zmtp}
failed=0
summary=$(printf '%-10s %6s %10s %6s %7s %8s  %s' target seconds execs cov ft corpus result)
for t in $targets; do
	case $t in
	msg | http | wire | zmtp) fuzz "$t" ;;
	*) echo "fuzz: unknown target '$t' (msg, http, wire, zmtp)" >&2; exit 2 ;;
	esac
done
echo "$summary"
[ "$failed" -eq 0 ] && echo "fuzz: no crashes" || echo "fuzz: crashes in $OUT/crashes/"
exit "$failed"
