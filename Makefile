# sandcell — build, install dependencies, run, test.
#   make run    deps + build + start the broker on 127.0.0.1:49999
#   make test   deps + build + every test

CC      ?= cc
BUILD   ?= build
BIN     ?= bin
CFLAGS  ?= -O2 -g
# Always applied, also when CFLAGS is given on the command line (test-asan).
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers \
           -D_GNU_SOURCE -MMD -MP
# msgpack-c is msgpack-c.pc (-lmsgpack-c) from Debian 13 on, msgpack.pc (-lmsgpackc) before
MSGPACK_LIBS := $(shell pkg-config --libs msgpack-c 2>/dev/null || pkg-config --libs msgpack 2>/dev/null || echo -lmsgpackc)
LDLIBS_PROTO  = -lnng $(MSGPACK_LIBS) -ljansson -lpthread
# libnftnl + libmnl: one netlink request (proxy/nftctr.c); libnftables: rulesets
NFTNL_LIBS := $(shell pkg-config --libs libnftnl libmnl 2>/dev/null || echo -lnftnl -lmnl)
LDLIBS_PROXY  = $(LDLIBS_PROTO) -lcjson -lsodium -lseccomp -lnftables $(NFTNL_LIBS)
LDLIBS_BROKER = $(LDLIBS_PROTO) -lmicrohttpd -lsodium -lnftables -lz
LDLIBS_TEST   = -lcriterion -lcurl

LISTEN  ?= 127.0.0.1:49999
# The project's kernelspecs: bash (kept in the repo) and Deno (written by deps).
export JUPYTER_PATH := $(CURDIR)/proxy/jupyter:$(CURDIR)/.deps/jupyter$(if $(JUPYTER_PATH),:$(JUPYTER_PATH))
# The IPython start-up profile, wherever the binaries were built (test-asan).
export SANDCELL_PYTHON_STARTUP ?= $(CURDIR)/proxy/python/sandcell_startup.py
# The Python of the python kernelspec: it compiles the profile ahead (below).
PYTHON ?= /usr/bin/python3
RUN_ARGS ?=

# proto/ (the IPC codec) and lib/ (shared helpers) go into every binary.
PROTO_SRC  = $(wildcard proto/*.c lib/*.c)
PROXY_SRC  = $(filter-out proxy/main.c proxy/boxlib.c proxy/hotpages.c proxy/init.c,$(wildcard proxy/*.c))
BROKER_SRC = $(filter-out broker/main.c,$(wildcard broker/*.c))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
PROTO_OBJ  = $(call obj,$(PROTO_SRC))
PROXY_OBJ  = $(call obj,$(PROXY_SRC))
BROKER_OBJ = $(call obj,$(BROKER_SRC))

PROGS = $(BIN)/sandcell-broker $(BIN)/sandcell-proxy $(BIN)/sandcellctl $(BIN)/libsandcell-box.so \
        $(BIN)/sandcell-init $(BIN)/sandcell-envd
# The box's code (sandbox.c and what it uses) for the Python template, which
# loads it with ctypes: the same sources as the proxy's, built position-independent.
BOXLIB_SRC = proxy/boxlib.c proxy/hotpages.c proxy/sandbox.c proxy/boxroot.c proxy/boxinit.c \
             proxy/filter.c proxy/limits.c proxy/packages.c lib/boxview.c \
             lib/cgroup.c lib/landlock.c lib/util.c lib/wsdisk.c
# The wrapper kernels' shared reader of their child's output: one source,
# copied into each of their kernelspec dirs (not in git), the one dir of its
# kernel's that a box shows; make install takes the copies along.
KERNEL_PY = proxy/jupyter/kernels/bash/sandcell_marked.py \
            proxy/jupyter/kernels/java/sandcell_marked.py
UNIT_TESTS = $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/*.c))
INTEG_TESTS = $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(wildcard tests/integration/*_test.c))

.PHONY: all bench bench-envd deps fuzz install run soak test test-install test-systemd test-unit test-options test-integration test-sdk test-asan clean \
        check-deps format image test-api test-deploy test-image

all: $(PROGS) $(BUILD)/profile.stamp $(KERNEL_PY)

# The profile's bytecode, which kernels load instead of compiling the profile
# at each start (see proxy/python/sandcell_startup.py). It is checked against
# the source's hash, so a stale one is only ignored. Skipped without Python.
$(BUILD)/profile.stamp: proxy/python/sandcell_profile.py proxy/python/sandcell_packages.py
	@mkdir -p $(dir $@)
	@if [ -x $(PYTHON) ]; then \
	  $(PYTHON) -m compileall -q --invalidation-mode checked-hash $^; fi
	@touch $@

proxy/jupyter/kernels/%/sandcell_marked.py: proxy/jupyter/sandcell_marked.py
	cp $< $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BIN)/sandcell-proxy: $(BUILD)/proxy/main.o $(PROXY_OBJ) $(PROTO_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_PROXY)

# (never sanitized: the interpreter that loads it has no ASan runtime)
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize% -fno-sanitize%,$(CFLAGS)) -fPIC -c -o $@ $<

$(BIN)/libsandcell-box.so: $(patsubst %.c,$(BUILD)/pic/%.o,$(BOXLIB_SRC))
	@mkdir -p $(BIN)
	$(CC) $(filter-out -fsanitize% -fno-sanitize%,$(CFLAGS) $(LDFLAGS)) -shared -Wl,--no-undefined \
	  -o $@ $^ -ljansson -lseccomp

# The init of a box forked from the template (proxy/init.c), beside the
# library: static, a few pages; mode 0711 so that the kernels' uids cannot
# read it, which keeps it non-dumpable after its exec (never sanitized either).
$(BUILD)/nosan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize% -fno-sanitize%,$(CFLAGS)) -c -o $@ $<

$(BIN)/sandcell-init: $(BUILD)/nosan/proxy/init.o $(BUILD)/nosan/proxy/boxinit.o
	@mkdir -p $(BIN)
	$(CC) $(filter-out -fsanitize% -fno-sanitize%,$(CFLAGS) $(LDFLAGS)) -static -o $@ $^
	chmod 0711 $@

# The OpenAPI document is assembled into the broker as it is (.incbin).
$(BUILD)/broker/openapi.o: docs/openapi.json

$(BIN)/sandcell-broker: $(BUILD)/broker/main.o $(BROKER_OBJ) $(PROTO_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_BROKER)

# envd's agent, which runs in a box as the contexts' uid (docs/ENVD.md): mode
# 0711 as sandcell-init, so that the tenant's processes cannot read it and it
# stays non-dumpable after its exec (no ptrace of it by the tenant's commands).
$(BIN)/sandcell-envd: $(BUILD)/envd/agent.o $(BUILD)/envd/proc.o $(BUILD)/envd/watch.o \
		      $(BUILD)/envd/file.o $(BUILD)/envd/meta.o \
		      $(PROTO_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_PROTO)
	chmod 0711 $@

$(BIN)/sandcellctl: $(BUILD)/ctl/sandcellctl.o $(PROTO_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_PROTO)

# Unit tests link proto/ and lib/, plus the daemon modules they test (neither
# main.c); integration tests drive the binaries.
$(BUILD)/tests/%: tests/unit/%.c $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS_PROXY) -lmicrohttpd -lzmq \
	  $(LDLIBS_TEST)

# each broker unit test links the module it tests (and what that module
# calls, kcache.o: a leaf); the layering (scripts/callgraph.sh) allows it
$(BUILD)/tests/validate_test: $(BUILD)/broker/validate.o $(BUILD)/broker/kcache.o
$(BUILD)/tests/frame_test: $(BUILD)/broker/frame.o
$(BUILD)/tests/caller_test: $(BUILD)/broker/caller.o $(BUILD)/broker/frame.o
$(BUILD)/tests/connect_test: $(BUILD)/broker/connect.o
$(BUILD)/tests/ctlpeer_test: $(BUILD)/broker/ctlpeer.o
$(BUILD)/tests/output_test: $(BUILD)/proxy/output.o
# the broker's core, its proxies a fake behind link.c's port (link_use)
$(BUILD)/tests/brokercore_test: $(BUILD)/broker/request.o $(BUILD)/broker/stream.o \
			 $(BUILD)/broker/waiter.o $(BUILD)/broker/pool.o $(BUILD)/broker/context.o \
			 $(BUILD)/broker/supervise.o $(BUILD)/broker/relay.o $(BUILD)/broker/answer.o \
			 $(BUILD)/broker/link.o $(BUILD)/broker/validate.o $(BUILD)/broker/events.o \
			 $(BUILD)/broker/lifecycle.o
$(BUILD)/tests/admit_test: $(BUILD)/proxy/admit.o $(BUILD)/proxy/unit.o $(BUILD)/proxy/output.o \
			  $(BUILD)/proxy/envset.o
$(BUILD)/tests/hotpages_test: $(BUILD)/proxy/hotpages.o
$(BUILD)/tests/cpus_test: $(BUILD)/broker/cpus.o
$(BUILD)/tests/wire_test: $(BUILD)/proxy/wire.o $(BUILD)/proxy/zmtp.o
$(BUILD)/tests/fuzz_replay_test: $(BUILD)/broker/validate.o $(BUILD)/broker/kcache.o \
				 $(BUILD)/proxy/wire.o $(BUILD)/proxy/zmtp.o \
				 $(BUILD)/proxy/output.o

# The integration harness (real brokers, libcurl; the runner's sweep of what
# tests leave) and the runner's hooks.
HARNESS = tests/integration/harness.c tests/integration/sweep.c tests/integration/inet.c
# ...and what only the suites link (criterion's assertions).
SUITE_ONLY = tests/integration/hooks.c tests/integration/keeper.c tests/integration/expect.c

# (only these sources: a test's .d may name a .c it includes, as lang_isolated_test does)
$(BUILD)/tests/%: tests/integration/%.c $(HARNESS) $(SUITE_ONLY) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(HARNESS) $(SUITE_ONLY) \
	  $(PROTO_OBJ) $(LDLIBS_PROTO) $(LDLIBS_TEST)

# A test binary whose test times out, run by faults_test (not a test itself).
$(BUILD)/tests/faults_test: $(BUILD)/tests/timeout_probe

# envd_test gzips what it sends (zlib)
$(BUILD)/tests/envd_test: LDLIBS_TEST += -lz

# The language tests #include the packages tests; run again with --isolation
# context (lang_isolated_test.c #includes lang_test.c).
$(BUILD)/tests/lang_test: tests/integration/lang_packages.c
$(BUILD)/tests/lang_isolated_test: tests/integration/lang_test.c tests/integration/lang_packages.c

# The benchmarks include a raw Jupyter client (the baseline): libzmq, with
# proxy/wire.c's messages.
$(BUILD)/bench: $(wildcard tests/bench/*.c) $(HARNESS) $(BUILD)/proxy/wire.o \
		$(BUILD)/proxy/zmtp.o $(BUILD)/proxy/filter.o $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS_PROXY) -lzmq -lcurl

$(BUILD)/soak: tests/soak/soak.c $(HARNESS) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS_PROTO) -lcurl

# Random faults while clients run (SOAK_MINUTES, default 2); not in make test.
soak: deps all $(BUILD)/soak
	SANDCELL_BIN=$(abspath $(BIN)) $(BUILD)/soak

# libFuzzer targets (clang, ASan+UBSan; run.sh installs clang if missing) on the
# IPC codec, /execute validation, the Jupyter wire parser and the ZMTP stream
# reader: FUZZ_SECONDS each (default 60), FUZZ="msg http wire zmtp" to choose. Not part of make test, which
# replays the seeds and saved crashes instead (tests/unit/fuzz_replay_test.c).
fuzz: deps
	@sh tests/fuzz/run.sh $(FUZZ)

# Benchmarks print figures; they are not part of make test.
bench: deps all $(BUILD)/bench
	SANDCELL_BIN=$(abspath $(BIN)) $(BUILD)/bench $(BENCH)

# envd's files and commands through the E2B SDK against cp and /execute
bench-envd: all
	sh tests/bench/envd.sh $(abspath $(BIN))

deps:
	@sh scripts/deps.sh

run: deps all
	exec $(BIN)/sandcell-broker --listen $(LISTEN) $(RUN_ARGS)

test: deps all
	@$(MAKE) --no-print-directory test-unit test-options test-integration test-api test-sdk \
	  test-systemd test-install test-deploy

test-unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t --jobs 1; done

# README.md's option table is the one sandcell-broker --help gives.
test-options: all
	@sh scripts/options-md.sh $(BIN) --check README.md

test-integration: all $(INTEG_TESTS)
	@set -e; for t in $(INTEG_TESTS); do echo "== $$t"; \
	  SANDCELL_BIN=$(abspath $(BIN)) $$t --jobs 1; done

# docs/openapi.json: valid OpenAPI 3.1, served as GET /openapi.json, and every
# real answer of a walk over the API (a broker from $(BIN)) valid against it.
test-api: all
	@SANDCELL_BIN=$(abspath $(BIN)) /usr/bin/python3 tests/api/openapi_test.py

test-sdk: all
	@sh tests/sdk/run.sh $(abspath $(BIN))

# ASan + UBSan build of everything, then the unit and integration tests.
# ASan's quarantine (256 MB by default) keeps freed memory from reuse: bounded
# here, so that a test of the broker's memory (envd's 100 MiB transfers in a
# window) measures sandcell, not the sanitizer; recent frees are still caught.
test-asan: deps
	@ASAN_OPTIONS=quarantine_size_mb=16$${ASAN_OPTIONS:+:$$ASAN_OPTIONS} \
	  $(MAKE) --no-print-directory BUILD=build/asan BIN=build/asan/bin \
	  CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  LDFLAGS="-fsanitize=address,undefined" test-unit test-integration

# systemd units must pass systemd-analyze verify (with ExecStart pointing at
# the binaries just built, since nothing is installed here).
test-systemd: all
	@d=$$(mktemp -d) && sed "s#/usr/local/bin#$(abspath $(BIN))#" systemd/sandcell.service \
	  >$$d/sandcell.service && cp systemd/sandcell.slice systemd/sandcell.socket $$d/ && \
	  systemd-analyze verify $$d/sandcell.service $$d/sandcell.slice $$d/sandcell.socket; \
	  rc=$$?; rm -rf $$d; \
	  [ $$rc -eq 0 ] && echo "systemd units: 1 passed, 0 failed" || \
	  { echo "systemd units: 0 passed, 1 failed"; exit 1; }

# The Kubernetes manifests against agent-sandbox's CRD schemas, and yamllint;
# then again as in a checkout without the CRDs: the schema checks are skipped,
# the rest still runs and passes. Then the monitoring files: promtool on the
# alerting rules, and each dashboard query's metrics against a live broker's.
test-deploy: all
	@/usr/bin/python3 tests/deploy/manifests_test.py
	@out=$$(SANDCELL_K8S_CRDS=/nonexistent /usr/bin/python3 tests/deploy/manifests_test.py) && \
	  echo "$$out" | tail -n 1 | grep -q ' 0 failed, 1 skipped$$' && \
	  echo "manifests without the CRDs: the schema checks skipped, the rest passed" || \
	  { echo "$$out"; echo "manifests without the CRDs: failed"; exit 1; }
	@SANDCELL_BIN=$(abspath $(BIN)) /usr/bin/python3 tests/deploy/monitoring_test.py

# The OCI image sandcell:VERSION and sandcell:latest (podman; not in make test);
# SUITE=trixie builds it on Debian 13 as sandcell:VERSION-trixie and :trixie.
image: deps all
	@sh scripts/image.sh

# Builds the image, runs it with podman: the E2B SDK test against it, /ready
# before and during a drain, podman stop within the grace with exit status 0.
# RUNTIME=docker: the same image under Debian's Docker (installed by
# scripts/docker-deps.sh, a dockerd of the test's own), three ways.
RUNTIME ?= podman
test-image: image
	@if [ "$(RUNTIME)" = docker ]; then sh scripts/docker-deps.sh; fi
	@RUNTIME=$(RUNTIME) sh tests/deploy/image_test.sh

# Everything goes under $(DESTDIR): binaries, kernelspecs and the start-up
# profile under $(PREFIX), the units in $(UNITDIR), naming $(PREFIX)'s paths.
PREFIX  ?= /usr/local
UNITDIR ?= /etc/systemd/system
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/sandcell/jupyter/kernels \
	  $(DESTDIR)$(PREFIX)/lib/sandcell $(DESTDIR)$(UNITDIR)
	install -m 755 $(filter-out %.so %/sandcell-init %/sandcell-envd,$(PROGS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 711 $(BIN)/sandcell-envd $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BIN)/libsandcell-box.so $(DESTDIR)$(PREFIX)/lib/sandcell/
	install -m 711 $(BIN)/sandcell-init $(DESTDIR)$(PREFIX)/lib/sandcell/
	cp -r proxy/jupyter/kernels/bash proxy/jupyter/kernels/java \
	  $(DESTDIR)$(PREFIX)/share/sandcell/jupyter/kernels/
	install -m 644 proxy/python/sandcell_startup.py proxy/python/sandcell_profile.py \
	  proxy/python/sandcell_packages.py proxy/python/sandcell_template.py \
	  proxy/python/sandcell_kshell.py \
	  $(DESTDIR)$(PREFIX)/share/sandcell/
	if [ -x $(PYTHON) ]; then $(PYTHON) -m compileall -q --invalidation-mode checked-hash \
	  $(DESTDIR)$(PREFIX)/share/sandcell/sandcell_profile.py \
	  $(DESTDIR)$(PREFIX)/share/sandcell/sandcell_packages.py; fi
	if [ -x "$$(ls .deps/deno/node_modules/@deno/linux-*/deno 2>/dev/null | head -n 1)" ]; then \
	  install -m 755 $$(ls .deps/deno/node_modules/@deno/linux-*/deno | head -n 1) \
	    $(DESTDIR)$(PREFIX)/lib/sandcell/deno && \
	  sh proxy/jupyter/deno-kernelspecs.sh $(PREFIX)/lib/sandcell/deno \
	    $(DESTDIR)$(PREFIX)/share/sandcell/jupyter; fi
	sed 's#/usr/local#$(PREFIX)#g' systemd/sandcell.service >$(DESTDIR)$(UNITDIR)/sandcell.service
	chmod 644 $(DESTDIR)$(UNITDIR)/sandcell.service
	install -m 644 systemd/sandcell.slice systemd/sandcell.socket $(DESTDIR)$(UNITDIR)/

# make install into a scratch DESTDIR with another PREFIX: nothing lands
# outside it, the unit names PREFIX's paths, the installed broker finds its kernels.
test-install: all
	@sh tests/install/run.sh $(abspath $(BIN))

clean:
	rm -rf $(BUILD) $(BIN) $(KERNEL_PY)

format:
	clang-format -i $(wildcard */*.c */*.h tests/*/*.c tests/*/*.h)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
