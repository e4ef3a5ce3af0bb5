# shunt: build, install and test.
#   make                 build/libshunt.so and build/shunt (and the test programs)
#   make test            the whole test suite (what CI runs)
#   make SANITIZE=1 ...  the same with ASan + UBSan, into build-san/
#   make SANITIZE=thread ...  with ThreadSanitizer, into build-tsan/ (make test-tsan)
#   make install         into $(PREFIX) (default /usr/local)

VERSION   := 0.1.0
PREFIX    ?= /usr/local
CC        ?= cc
SANITIZE  ?= 0

ifeq ($(SANITIZE),1)
BUILD     ?= build-san
SANFLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT       := -O1
else ifeq ($(SANITIZE),thread)
# ThreadSanitizer (make test-tsan).  GCC warns that TSan does not model
# standalone fences (-Wtsan); the fences left order atomics against atomics
# (doorbell.c's seq_cst fence) or guard sequence-locked copies another
# process writes, where TSan reports nothing either way.
BUILD     ?= build-tsan
SANFLAGS  := -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
OPT       := -O1
else
BUILD     ?= build
SANFLAGS  :=
OPT       := -O2
endif

WARN      := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS    ?=
BASEFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -Isrc -Iinclude -DSHUNT_VERSION=\"$(VERSION)\" $(SANFLAGS) $(CFLAGS)
LIBFLAGS  := $(BASEFLAGS) -fPIC -fvisibility=hidden -pthread

LIB_SRC   := $(wildcard src/interpose/*.c src/core/*/*.c src/transport/*.c src/registry/*.c src/base/*.c)
LIB_OBJ   := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))
TOOL_SRC  := $(wildcard src/tool/*.c)
HEADERS   := $(wildcard src/*/*.h src/core/*/*.h)
# the tool reads the registry with the library's own code (not preloaded):
# the layers below core (docs/architecture.md, "Layers, as folders")
TOOL_OBJ  := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/registry/*.c src/transport/*.c src/base/*.c))
TEST_SRC  := $(wildcard tests/conformance/*.c)
TEST_BIN  := $(patsubst tests/conformance/%.c,$(BUILD)/tests/conformance/%,$(TEST_SRC))
STRESS_BIN := $(BUILD)/tests/stress/chaos
UNIT_SRC  := $(wildcard tests/unit/*.c)
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
UNIT_DEPS := $(filter-out $(BUILD)/obj/interpose/%,$(LIB_OBJ))
# The layers' folders (docs/architecture.md, "Layers, as folders"), and the
# objects of some of them: $(call layer_objs,transport base).
LAYERS    := base transport registry core/fd core/wait core/conn core/kinds core/process
layer_objs = $(foreach l,$(1),$(if $(filter $(l),$(LAYERS)),,$(error unknown layer '$(l)' (one of: $(LAYERS))))\
               $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/$(l)/*.c)))
TESTFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -pthread -Itests/lib

.PHONY: all lib tool tests bench check deps layers test test-unit test-conformance test-fabric-ucx test-integration test-san test-tsan tsan-shim test-stress install clean

all: lib tool tests bench
lib: $(BUILD)/libshunt.so
tool: $(BUILD)/shunt
tests: $(TEST_BIN) $(UNIT_BIN) $(STRESS_BIN) $(BUILD)/tests/programs/synopt_peer $(BUILD)/tests/programs/listener_flagger \
       $(BUILD)/tests/programs/ucx_echo $(BUILD)/tests/programs/claim_race $(BUILD)/tests/programs/recv_pause_shim.so
bench: $(BUILD)/bench/pingpong $(BUILD)/bench/zeropoll $(BUILD)/bench/busyserv $(BUILD)/bench/signal_cost $(BUILD)/bench/kcopy $(BUILD)/bench/ucx_probe $(BUILD)/bench/fabric_ring_bench $(BUILD)/bench/callcost_shim.so $(BUILD)/bench/null_shim.so $(if $(filter x86_64,$(shell uname -m)),$(BUILD)/bench/ringlab)

$(BUILD)/obj/%.o: src/%.c $(HEADERS) src/base/calls.def
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -c $< -o $@

# The export map comes from the same list of calls as the wrappers.
$(BUILD)/libshunt.map: src/interpose/exports.map.in src/base/calls.def
	@mkdir -p $(dir $@)
	$(CC) -E -P -Isrc -x c $< -o $@

$(BUILD)/libshunt.so: $(LIB_OBJ) $(BUILD)/libshunt.map
	$(CC) $(LIBFLAGS) -shared -Wl,--version-script=$(BUILD)/libshunt.map -Wl,--no-undefined-version \
	    -Wl,-z,defs -Wl,-z,now -o $@.tmp $(LIB_OBJ) -ldl
	mv -f $@.tmp $@   # a program starting now never maps a half-written library

$(BUILD)/shunt: $(patsubst src/%.c,$(BUILD)/obj/%.o,$(TOOL_SRC)) $(TOOL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) -pthread -o $@ $^ -ldl

$(BUILD)/tests/conformance/%: tests/conformance/%.c $(wildcard tests/lib/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@ -ldl

# The stress and chaos run (make test-stress, tests/stress/run_chaos.py):
# chaos.c runs the rounds and judges them, chaos_peers.c is the server and the
# clients, chaos.h what both share.
$(STRESS_BIN): tests/stress/chaos.c tests/stress/chaos_peers.c tests/stress/chaos.h $(wildcard tests/lib/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $(filter %.c,$^) -o $@ -ldl

# Both ends of tests/integration/test_fabric_synopt.py: registry/synopt.c
# reading real SYNs (it needs libc's own calls, base/real.h).
$(BUILD)/tests/programs/synopt_peer: tests/programs/synopt_peer.c $(BUILD)/obj/registry/synopt.o $(call layer_objs,base)
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) $< $(BUILD)/obj/registry/synopt.o $(call layer_objs,base) -o $@ -ldl

# Another party's sock_ops program that flags listeners (test_fabric_synopt.py).
$(BUILD)/tests/programs/listener_flagger: tests/programs/listener_flagger.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@

# A program that uses UCX itself, as MPI does (test_ucx_programs.py).
$(BUILD)/tests/programs/ucx_echo: tests/programs/ucx_echo.c tests/lib/ucx_start.h
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@ -lucp -lucs

# A claim that lands between shunt's look at a pending offer and the
# kernel's read, made certain by a shim behind libshunt.so (test_claim_race.py).
$(BUILD)/tests/programs/claim_race: tests/programs/claim_race.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@

$(BUILD)/tests/programs/recv_pause_shim.so: tests/programs/recv_pause_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) -shared -fPIC $< -o $@ -ldl

# The measuring program of `shunt bench` (bench/shuntbench.py finds it
# here, or installed beside the driver in PREFIX/lib/shunt).
$(BUILD)/bench/pingpong: bench/pingpong.c bench/pingpong_conn.c bench/pingpong_cc.c bench/pingpong.h bench/floor_ring.h
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $(filter %.c,$^) -o $@ -ldl

# The per-call timer bench/callcost.py preloads in front of libshunt.so.
# The interposer that only forwards: what LD_PRELOAD costs by itself
# (docs/benchmarks.md, "Where the cold cost is").
$(BUILD)/bench/null_shim.so: bench/null_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) -shared -fPIC $< -o $@ -ldl

$(BUILD)/bench/callcost_shim.so: bench/callcost_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) -fPIC -shared $< -o $@ -ldl

# The zero-timeout polling ping-pong of `shunt bench` (its zpoll test).
$(BUILD)/bench/zeropoll: bench/zeropoll.c bench/bench_util.h
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@ -ldl

# The busy servers of `shunt bench` (a process or a thread per connection,
# CPU work per request, N clients; issue 18).
$(BUILD)/bench/busyserv: bench/busyserv.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@ -ldl

# What each signal of a busy machine costs a waiting thread to read
# (docs/architecture.md, "Waiting on a busy machine").
$(BUILD)/bench/signal_cost: bench/signal_cost.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@

# What UCX gives two processes of one host (docs/architecture.md, "Between
# namespaces and hosts"); links UCX, which libshunt.so never does.
$(BUILD)/bench/ucx_probe: bench/ucx_probe.c tests/lib/ucx_start.h
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@ -lucp -lucs

# The fabric ring against kernel TCP (docs/benchmarks.md, "The fabric ring
# against kernel TCP"): the transport's own objects, UCX through dlopen as
# libshunt.so loads it (so getenv must be the fixture's, found by UCX).
# The stream is the fabric_stream*.c objects.
FSTREAM_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/core/conn/fabric_stream*.c))
$(BUILD)/bench/fabric_ring_bench: bench/fabric_ring_bench.c tests/unit/fabric_fixture.h $(call layer_objs,transport base) $(FSTREAM_OBJ) $(BUILD)/obj/registry/hello.o
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -Itests/lib -Itests/unit $< $(call layer_objs,transport base) $(FSTREAM_OBJ) $(BUILD)/obj/registry/hello.o -o $@ -ldl -rdynamic

# The kernel's copies against memcpy (docs/benchmarks.md, "The 1 MiB
# ping-pong against memcpy").
$(BUILD)/bench/kcopy: bench/kcopy.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@

# The bare two-process ring of docs/benchmarks.md ("The 1 MiB ping-pong
# against memcpy"); x86-64 only (its copy routines are AVX loops).
$(BUILD)/bench/ringlab: bench/ringlab.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) $< -o $@

# What the README's test command and CI run: dependencies, the suite, and
# the unit tests and the conformance suite again under the sanitizers.
check: deps
	$(MAKE) test
	$(MAKE) test-san
	$(MAKE) test-tsan
	$(MAKE) test-stress

deps:
	scripts/install-deps

# Unit tests of single modules (ring, channel, registry...), linked with the
# library's objects but not preloaded.  UNIT_LAYERS_<test> names the layers a
# test links (their folders under src/): it then links nothing above them,
# which keeps the layers honest; without it, every object but interpose's.
UNIT_LAYERS_test_ring        := transport base
UNIT_LAYERS_test_ring_corrupt := transport base
UNIT_LAYERS_test_channel     := transport base
UNIT_LAYERS_test_registry    := registry transport base
UNIT_LAYERS_test_registry_procs := registry transport base
UNIT_LAYERS_test_fdtable     := core/fd registry transport base
UNIT_LAYERS_test_procstat    := registry transport base
UNIT_LAYERS_test_sockdiag    := registry transport base
UNIT_LAYERS_test_synopt      := registry transport base
UNIT_LAYERS_test_hello       := registry transport base
UNIT_LAYERS_test_settings    := base
UNIT_LAYERS_test_kernel_looks := core/wait core/fd registry transport base
UNIT_LAYERS_test_spin := core/wait core/fd registry transport base
UNIT_LAYERS_test_fabric_engine := transport base
# its getenv must be the one a library loaded later binds to, as libshunt.so's is
UNIT_LDFLAGS_test_fabric_engine := -rdynamic
UNIT_LAYERS_test_fabric_ring := transport base
UNIT_LDFLAGS_test_fabric_ring := -rdynamic
UNIT_LDFLAGS_test_fabric_stream := -rdynamic
UNIT_LDFLAGS_test_fabric_stream_leave := -rdynamic
unit_objs = $(if $(UNIT_LAYERS_$(1)),$(call layer_objs,$(UNIT_LAYERS_$(1))),$(UNIT_DEPS))

.SECONDEXPANSION:
$(BUILD)/tests/unit/%: tests/unit/%.c $$(call unit_objs,$$*) $(wildcard tests/lib/*.h) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -Wno-missing-prototypes -Itests/lib $< $(call unit_objs,$*) -o $@ -ldl $(UNIT_LDFLAGS_$*)

# Every unit test runs, even after one failed; 77 is a skip (tests/run_programs.py).
test-unit: $(UNIT_BIN)
	python3 tests/run_programs.py --suite unit --build $(BUILD)

# The layers of docs/architecture.md ("Layers, as folders"), checked on the
# built objects: no call up a layer, no cycle across folders.
layers: lib tool
	scripts/check-layers --build $(BUILD)

# The suite: the layers, every conformance test without shunt, under it, and
# under it between two network namespaces (crossns: root, about 30 s), there
# on the fabric engine, on UCX's shared-memory lanes and on its TCP lanes
# (fabric, fabric-tcp: about 80 s each; their known failures are
# tests/conformance/fabric_known_failures.txt), then the integration tests
# with real programs.
CONFORMANCE_MODES := plain,passthrough,accelerated,crossns,fabric,fabric-tcp
test: all
	$(MAKE) layers
	$(MAKE) test-unit
	python3 tests/run_programs.py --build $(BUILD) --modes $(CONFORMANCE_MODES)
	$(MAKE) test-fabric-ucx
	python3 -m pytest -q tests/integration

# The fabric modes again on UCX versions other than Debian's (scripts/install-deps
# puts PyPI's there): the versions the engine accepts must all pass
# (docs/compatibility.md, "UCX versions").  1.15 (the first whose `self` lanes
# read a region itself), 1.18 (Debian 13's) and 1.22 (the newest, on UCX's new
# protocols).
UCX_OTHER ?= 1.15.0 1.18.1 1.22.0
test-fabric-ucx: all
	set -e; for v in $(UCX_OTHER); do \
	    python3 tests/run_programs.py --build $(BUILD) --modes fabric,fabric-tcp --ucx /var/cache/shunt-ucx/$$v/libucx/lib; \
	done

test-conformance: all
	python3 tests/run_programs.py --build $(BUILD) --modes $(CONFORMANCE_MODES)

# The unit tests and the conformance suite under ASan + UBSan.  The unit
# tests are built from the sanitized objects, runtime linked in; the
# conformance programs are not sanitized, so libasan is preloaded before the
# library.
test-san:
	$(MAKE) SANITIZE=1 all
	python3 tests/run_programs.py --suite unit --build build-san --sanitizer
	python3 tests/run_programs.py --build build-san --modes passthrough,accelerated --sanitizer

# Many connections and threads racing shutdown, close and poll, peers killed
# at random moments, every byte checked: 15 s with the library as built, 15 s
# more with raw clones moving connections back to TCP under the threads, then
# 15 s with ASan + UBSan's (other timings, memory errors); about a minute.
test-stress: lib tests
	python3 tests/stress/run_chaos.py --build $(BUILD) --seconds 15
	python3 tests/stress/run_chaos.py --build $(BUILD) --seconds 15 --raw-clones
	$(MAKE) SANITIZE=1 lib tests
	python3 tests/stress/run_chaos.py --build build-san --sanitizer --seconds 15

# The threaded conformance tests with libshunt.so built with ThreadSanitizer,
# accelerated: a report fails the test (tests/run_programs.py --sanitizer
# thread says how the runtime is preloaded, tests/tsan/ what it needs).
TSAN_TESTS := threads_,procs_,epoll_,fork_child_close,fork_concurrent_send,downgrade_both_full,both_send_first,send_to_stalled_reader
test-tsan:
	$(MAKE) SANITIZE=thread all tsan-shim
	python3 tests/run_programs.py --build build-tsan --modes accelerated --sanitizer thread \
	    --filter $(TSAN_TESTS) --timeout 120

# Only for TSan runs: the registry's pthread_mutex_clocklock as a call TSan
# intercepts (tests/tsan/clocklock.c).
tsan-shim: $(BUILD)/tests/tsan/clocklock.so
$(BUILD)/tests/tsan/clocklock.so: tests/tsan/clocklock.c
	@mkdir -p $(dir $@)
	$(CC) $(TESTFLAGS) -fPIC -shared $< -o $@

# `shunt bench` runs PREFIX/lib/shunt/shuntbench.py, which finds pingpong beside it.
BENCH_PY  := bench/shuntbench.py bench/benchlib.py bench/stdtools.py bench/plots.py bench/netnsbench.py bench/vethpair.py

install: lib tool bench
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/shunt
	install -m 0755 $(BUILD)/libshunt.so $(DESTDIR)$(PREFIX)/lib/libshunt.so
	install -m 0755 $(BUILD)/shunt $(DESTDIR)$(PREFIX)/bin/shunt
	install -m 0755 $(BUILD)/bench/pingpong $(DESTDIR)$(PREFIX)/lib/shunt/pingpong
	install -m 0755 $(BUILD)/bench/zeropoll $(DESTDIR)$(PREFIX)/lib/shunt/zeropoll
	install -m 0755 $(BUILD)/bench/busyserv $(DESTDIR)$(PREFIX)/lib/shunt/busyserv
	install -m 0644 $(BENCH_PY) $(DESTDIR)$(PREFIX)/lib/shunt/

clean:
	rm -rf build build-san build-tsan

# The demonstration: the same real programs (sockperf, NetPIPE) over kernel
# TCP and under shunt, side by side (bench/README.md).
.PHONY: demo demo-netns
demo:
	scripts/install-deps --demo     # first: a fresh machine may not even have a compiler
	$(MAKE) lib tool
	python3 bench/demo.py --build $(BUILD)

# The same between two network namespaces of this host joined by a veth pair
# (root): `shunt bench --netns` (bench/netnsbench.py); the host is
# fabric-enabled if it was not (and left so: `shunt fabric disable` undoes it).
demo-netns:
	scripts/install-deps --demo     # the compiler, and matplotlib for the graphs
	$(MAKE) lib tool $(BUILD)/bench/pingpong
	$(BUILD)/shunt bench --netns --enable-fabric --out $(BUILD)/demo-netns
