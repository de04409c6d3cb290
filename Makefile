# graft: a thin wrapper over meson.  Everything real lives in meson.build;
# this file only saves typing and installs the Debian packages graft needs.
#
#   make                 configure (first time) and build in ./build
#   make test            tests in ./build, then again in ./build-asan
#                        (AddressSanitizer + UBSan) and in ./build-clang (the
#                        same, built with clang), then the sched, graph and
#                        common suites in ./build-tsan (ThreadSanitizer), then
#                        the fuzz targets for TEST_FUZZ_SECONDS in all;
#                        fails if any fails
#   make tsan            only the ThreadSanitizer build and its tests (clang,
#                        LLVM's OpenMP runtime and its Archer tool)
#   make stress          the `stress` suite only (left out of `make test`)
#   make demo            build and run examples/fashion_mnist: train an MLP on
#                        Fashion-MNIST (Debian's dataset-fashion-mnist), print
#                        the test accuracy, per-class table and confusion
#                        matrix; writes ./fashion_mnist_out/ (checkpoint,
#                        metrics.csv, curves.png); DEMO_ARGS adds options
#                        (e.g. DEMO_ARGS="--model cnn"; --help lists them)
#   make bench           build and run every bench/bench_* program (--json;
#                        bench_mpi under BENCH_MPIRUN, mpirun -np 2):
#                        prints each one's tables, collects every row in
#                        BENCH_JSON (build/bench-results.jsonl)
#   make bench-table     write BENCH_JSON's tables into docs/benchmarks.md
#   make bench-torch     the demo's training steps against PyTorch 1.13 on
#                        this machine, in alternating rounds (bench/vs_torch.py;
#                        installs Debian's python3-torch first, about 1 GB)
#   make install         meson install into PREFIX (/usr/local) and LIBDIR
#                        (lib/<multiarch>, e.g. lib/x86_64-linux-gnu, else lib),
#                        DESTDIR honoured; then ldconfig when run as root
#                        without DESTDIR
#   make clean           remove the build directories, quickstart.dot and
#                        fashion_mnist_out
#   make deps            install missing Debian packages (root) or say how
#   make fuzz            build the libFuzzer targets in ./build-fuzz (clang) and
#                        run each for FUZZ_SECONDS on a scratch copy of its
#                        corpus; fails on a crash, leak, timeout or OOM
#   make fuzz-seeds      regenerate the generated seed inputs of each corpus
#   make fuzz-merge      add the inputs of the last `make fuzz` that reach new
#                        coverage to tests/fuzz/corpus (then review and commit)
#
# Variables: BUILD, ASAN_BUILD, CLANG_BUILD, TSAN_BUILD, PREFIX, LIBDIR, BENCH_JSON,
# SUITES="graph sched" (--suite each),
# TSAN_SUITES (default "sched graph common"), TSAN_ARCHER (path of libarcher.so),
# MESON_TEST_ARGS, MESON_SETUP_ARGS, DEMO_ARGS, BENCH_ARGS (more options for each bench),
# BENCH_MPIRUN (how bench_mpi is started), TORCH_ARGS (options of vs_torch.py),
# STRESS_COUNT (sets -Dstress_count), NO_DEPS=1 (skip the package check),
# FUZZ_BUILD, FUZZ_SECONDS (per target, default 60), FUZZ_TARGETS, FUZZ_ARGS
# (more libFuzzer flags, e.g. -jobs=2), TEST_FUZZ_SECONDS (make test's fuzzing
# time, split among the targets; default 120, 0 = skip).

MESON           ?= meson
BUILD           ?= build
ASAN_BUILD      ?= build-asan
CLANG_BUILD     ?= build-clang
TSAN_BUILD      ?= build-tsan
PREFIX          ?= /usr/local
# The library, graft.pc and the CMake package go to PREFIX/LIBDIR: Debian's
# multiarch directory when the compiler names one, else lib.  pkg-config's
# default path and ld.so.conf cover both for /usr/local and /usr on Debian;
# meson's own default without dpkg-dev (dpkg-architecture) is lib64, which
# neither searches there.
LIBDIR          ?= $(or $(addprefix lib/,$(shell $(CC) -print-multiarch 2>/dev/null)),lib)
SUITES          ?=
MESON_TEST_ARGS ?=
MESON_SETUP_ARGS ?=
BENCH_ARGS      ?=
STRESS_COUNT    ?=
NO_DEPS         ?=

# libopenmpi-dev, openmpi-bin: data-parallel training over MPI (graft/mpi.h,
# the dist suite's 2-rank test under mpirun, bench_mpi, fashion_mnist --mpi);
# python3: tests/readme and bench/bench_table.py; cmake: the install test's
# find_package(graft) consumer; libudev-dev: `pkg-config --static --libs
# graft` names -ludev (libhwloc.a's own dependency).
DEB_PACKAGES := gcc pkg-config meson ninja-build libopenblas-dev libhwloc-dev libcmocka-dev clang libclang-rt-14-dev libomp-dev libjansson-dev python3 cmake libudev-dev \
                zlib1g-dev dataset-fashion-mnist gnuplot-nox libopenmpi-dev openmpi-bin

SETUP_ARGS      := --prefix=$(PREFIX) --libdir=$(LIBDIR) $(MESON_SETUP_ARGS)
ASAN_SETUP_ARGS := $(SETUP_ARGS) -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
TSAN_SETUP_ARGS := $(SETUP_ARGS) -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug

# The stress suite is opt-in: left out unless SUITES names it.
SUITE_ARGS := $(foreach s,$(SUITES),--suite $(s)) \
              $(if $(filter stress,$(SUITES)),,--no-suite stress)
TEST_ARGS  := --print-errorlogs -v $(SUITE_ARGS) $(MESON_TEST_ARGS)

LSAN_SUPP := $(CURDIR)/tests/lsan.supp
ASAN_ENV  := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
             $(if $(wildcard $(LSAN_SUPP)),LSAN_OPTIONS=suppressions=$(LSAN_SUPP):print_suppressions=0)

# ThreadSanitizer: clang, with LLVM's OpenMP runtime (clang -fopenmp links
# libomp; GCC's libgomp is invisible to TSan) and Archer, the OMPT tool that
# tells TSan about OpenMP's synchronization (parallel regions, barriers,
# task dependences).  No suppressions: any report fails the test (exit 66).
# ignore_noninstrumented_modules=1 is Archer's documented setting: accesses
# made inside uninstrumented libraries (libomp, OpenBLAS) are not checked.
# OpenBLAS runs with one thread: graft calls it from its own workers, one
# tile each, and a pthreads OpenBLAS would otherwise start a pool of idle,
# uninstrumented threads.  TSAN_SUITES: the suites whose tests run the
# parallel executors (sched: random DAGs, faults, stress, concurrent calls,
# deques; graph and common: variables, hostile input, allocation failure);
# kernels and grad run their graphs on the sequential executor almost only.
# Smaller case counts than make test's: TSan is 5-15x slower.
TSAN_SUITES ?= sched graph common
TSAN_ARCHER ?= $(wildcard $(abspath $(dir $(shell clang -print-resource-dir 2>/dev/null))../libarcher.so))
TSAN_ENV  := OMP_TOOL_LIBRARIES=$(TSAN_ARCHER) \
             TSAN_OPTIONS=ignore_noninstrumented_modules=1:halt_on_error=0:exitcode=66 \
             OPENBLAS_NUM_THREADS=1 \
             GRAFT_TEST_DAGS=100 GRAFT_TEST_PLANS=500 GRAFT_TEST_CALLS=1000
TSAN_TEST_ARGS = --print-errorlogs -v $(foreach s,$(TSAN_SUITES),--suite $(s)) \
                 --no-suite stress $(MESON_TEST_ARGS)

# A user-given PREFIX (or LIBDIR) also applies to an already configured
# build directory.
ifneq ($(filter command line environment,$(origin PREFIX) $(origin LIBDIR)),)
RECONFIGURE_PREFIX := 1
endif

# $(call configure,DIR,SETUP_ARGS): shell code that runs `meson setup` unless
# DIR holds a finished configuration (build.ninja); a half-made DIR left by a
# failed setup is set up again in place.
define configure
if [ ! -f $(1)/build.ninja ]; then \
  if [ -f $(1)/meson-private/coredata.dat ]; then \
    $(MESON) setup --reconfigure $(2) $(1); \
  else \
    $(MESON) setup $(2) $(1); \
  fi; \
fi
endef

# $(call build_and_test,DIR,SETUP_ARGS,ENV[,TEST_ARGS]): configure, compile,
# test (TEST_ARGS, else $(TEST_ARGS)); the status of the first step that fails.
define build_and_test
( $(call configure,$(1),$(2)) && \
  $(MESON) compile -C $(1) && \
  rm -f $(1)/meson-logs/testlog.json && \
  env $(3) $(MESON) test -C $(1) $(if $(4),$(4),$(TEST_ARGS)) )
endef

# Shell code: the ThreadSanitizer build and its tests (clang for the setup);
# fails at once, with a hint, without Archer (TSan would not see OpenMP's
# synchronization).
define tsan_build_and_test
( if [ ! -f "$(TSAN_ARCHER)" ]; then \
    echo "graft: libarcher.so not found (Debian: libomp-dev); set TSAN_ARCHER=/path/to/libarcher.so" >&2; \
    exit 1; \
  fi; \
  export CC=clang; \
  $(call build_and_test,$(TSAN_BUILD),$(TSAN_SETUP_ARGS),$(TSAN_ENV),$(TSAN_TEST_ARGS)) )
endef

.PHONY: all build deps test tsan stress demo bench bench-table bench-torch install clean help

all: build

build: deps
	@$(call configure,$(BUILD),$(SETUP_ARGS))
	$(if $(RECONFIGURE_PREFIX),$(MESON) configure $(BUILD) --prefix=$(PREFIX) --libdir=$(LIBDIR))
	$(if $(STRESS_COUNT),$(MESON) configure $(BUILD) -Dstress_count=$(STRESS_COUNT))
	$(MESON) compile -C $(BUILD)

# Installs missing packages when run as root; otherwise prints the command.
# With everything installed it calls no apt at all.
deps:
	@if [ -n "$(NO_DEPS)" ]; then exit 0; fi; \
	if ! command -v dpkg >/dev/null 2>&1; then \
	  echo "graft: no dpkg here; not checking packages ($(DEB_PACKAGES))" >&2; exit 0; \
	fi; \
	missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	install="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$$missing"; \
	if [ "$$(id -u)" -ne 0 ]; then \
	  echo "graft: missing Debian packages:$$missing" >&2; \
	  echo "graft: run as root:  apt-get update && $$install" >&2; \
	  exit 1; \
	fi; \
	echo "graft: installing missing packages:$$missing"; \
	apt-get update && env $$install

test: deps
	@rc=0; \
	echo "==> $(BUILD): tests"; \
	$(call build_and_test,$(BUILD),$(SETUP_ARGS),) || { rc=1; echo "==> $(BUILD): FAILED"; }; \
	echo "==> $(ASAN_BUILD): tests under AddressSanitizer + UBSan"; \
	$(call build_and_test,$(ASAN_BUILD),$(ASAN_SETUP_ARGS),$(ASAN_ENV)) || { rc=1; echo "==> $(ASAN_BUILD): FAILED"; }; \
	echo "==> $(CLANG_BUILD): tests under AddressSanitizer + UBSan, built with clang"; \
	( export CC=clang; $(call build_and_test,$(CLANG_BUILD),$(ASAN_SETUP_ARGS),$(ASAN_ENV)) ) \
	  || { rc=1; echo "==> $(CLANG_BUILD): FAILED"; }; \
	echo "==> $(TSAN_BUILD): $(TSAN_SUITES) tests under ThreadSanitizer"; \
	$(tsan_build_and_test) || { rc=1; echo "==> $(TSAN_BUILD): FAILED"; }; \
	if [ $(TEST_FUZZ_SECONDS) -gt 0 ]; then \
	  echo "==> $(FUZZ_BUILD): fuzz targets, $(TEST_FUZZ_SECONDS) s in all"; \
	  $(MAKE) --no-print-directory fuzz NO_DEPS=1 \
	    FUZZ_SECONDS=$$(( $(TEST_FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)) )) \
	    || { rc=1; echo "==> $(FUZZ_BUILD): FAILED"; }; \
	fi; \
	if [ $$rc -eq 0 ]; then echo "==> make test: all passed"; else echo "==> make test: FAILED"; fi; \
	exit $$rc

tsan: deps
	@echo "==> $(TSAN_BUILD): $(TSAN_SUITES) tests under ThreadSanitizer"; \
	$(tsan_build_and_test) || { echo "==> $(TSAN_BUILD): FAILED"; exit 1; }

stress: build
	$(MESON) test -C $(BUILD) --print-errorlogs -v --suite stress $(MESON_TEST_ARGS)

DEMO_ARGS ?=

demo: build
	$(BUILD)/examples/fashion_mnist $(DEMO_ARGS)

# Every benchmark runs once, with --json, into BENCH_JSON (bench_table.py
# says what the file holds): a {"type":"run"} line (date, kernel, memory,
# load average), then each program's lines tagged "bench":"bench_<topic>"
# (its header has the name already) and a {"type":"exit","status":N} line,
# and a {"type":"run_end"} line (date, load average); each program's tables
# print as it ends.  The file is replaced at the end of the run only, so an
# interrupted run leaves the last full one.
BENCH_JSON  ?= $(BUILD)/bench-results.jsonl
# bench_mpi (built with MPI) runs under this: 2 ranks, unbound (its 1-rank
# baseline runs 2 threads on rank 0).
BENCH_MPIRUN ?= env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                mpirun -np 2 --oversubscribe --bind-to none
BENCH_TABLE := python3 bench/bench_table.py

bench: build
	@rc=0; found=0; part="$(BENCH_JSON).part"; one="$(BENCH_JSON).one"; \
	printf '{"type":"run","date":"%s","kernel":"%s","machine":"%s","memory":"%s","load":"%s"}\n' \
	  "$$(date -u '+%Y-%m-%d %H:%M UTC')" "$$(uname -sr)" "$$(uname -m)" \
	  "$$(awk '/^MemTotal:/ { printf "%.0f GiB", $$2 / 1048576 }' /proc/meminfo 2>/dev/null)" \
	  "$$(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)" >"$$part" || exit 1; \
	for b in $(BUILD)/bench/bench_*; do \
	  if [ -f "$$b" ] && [ -x "$$b" ]; then \
	    found=1; name=$${b##*/}; run=; [ "$$name" != bench_mpi ] || run="$(BENCH_MPIRUN)"; \
	    echo "==> $${run:+$$run }$$b --json $(BENCH_ARGS)"; \
	    $$run "$$b" --json $(BENCH_ARGS) >"$$one"; status=$$?; [ $$status -eq 0 ] || rc=1; \
	    sed '/^{"type":"header"/!s/^{/{"bench":"'"$$name"'",/' "$$one" >>"$$part"; \
	    printf '{"bench":"%s","type":"exit","status":%d}\n' "$$name" $$status >>"$$part"; \
	    $(BENCH_TABLE) --bench "$$name" "$$part" || rc=1; echo; \
	  fi; \
	done; \
	rm -f "$$one"; \
	printf '{"type":"run_end","date":"%s","load":"%s"}\n' \
	  "$$(date -u '+%Y-%m-%d %H:%M UTC')" "$$(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)" >>"$$part"; \
	if [ $$found -eq 0 ]; then echo "graft: no benchmarks in $(BUILD)/bench"; rm -f "$$part"; exit 1; fi; \
	mv "$$part" "$(BENCH_JSON)" && \
	echo "==> every row: $(BENCH_JSON); make bench-table writes the tables into docs/benchmarks.md"; \
	exit $$rc

# PyTorch is only a benchmark's baseline: not in DEB_PACKAGES.
TORCH_ARGS ?=
bench-torch: build
	@$(MAKE) --no-print-directory deps DEB_PACKAGES=python3-torch
	python3 bench/vs_torch.py --build $(BUILD) $(TORCH_ARGS)

bench-table:
	@if [ ! -f "$(BENCH_JSON)" ]; then echo "graft: no $(BENCH_JSON): run make bench first" >&2; exit 1; fi
	$(BENCH_TABLE) --update docs/benchmarks.md "$(BENCH_JSON)"

# meson 1.0 leaves the loader's cache as it was: without ldconfig a program
# does not find a libgraft.so.0 new in /usr/local/lib/... until the next
# ldconfig run.  Not for a DESTDIR (a staging tree), nor without root (a
# prefix of one's own, searched through LD_LIBRARY_PATH or an rpath).
install: build
	$(MESON) install -C $(BUILD) $(if $(DESTDIR),--destdir "$(DESTDIR)")
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then \
	  echo "ldconfig"; PATH="$$PATH:/sbin:/usr/sbin" ldconfig; \
	fi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(CLANG_BUILD) $(TSAN_BUILD) quickstart.dot fashion_mnist_out

# ---- fuzzing (tests/fuzz/README.md) --------------------------------------
# Each target runs on a scratch copy of tests/fuzz/corpus/<target>, so the
# committed corpus grows only through `make fuzz-merge`.  -timeout catches
# hangs (seconds per input), -rss_limit_mb runaway memory; libFuzzer exits
# non-zero on any finding and leaves the input in
# $(FUZZ_BUILD)/fuzz-work/<target>/artifacts.  Replay one with
# $(FUZZ_BUILD)/tests/fuzz/fuzz_<target> FILE (or fuzz_replay_<target>).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
TEST_FUZZ_SECONDS ?= 120
FUZZ_TARGETS ?= $(notdir $(wildcard tests/fuzz/corpus/*))
FUZZ_ARGS    ?=
FUZZ_FLAGS   := -timeout=30 -rss_limit_mb=2048 -max_len=1024 -print_final_stats=1
FUZZ_WORK    := $(FUZZ_BUILD)/fuzz-work
# Shell code: the FUZZ_TARGETS that the fuzz build defines, one a line; a
# target the build leaves out (allreduce, without MPI) is named on stderr.
FUZZ_BUILT    = for t in $(FUZZ_TARGETS); do \
                  if grep -q "^build tests/fuzz/fuzz_replay_$$t:" $(FUZZ_BUILD)/build.ninja; then \
                    echo $$t; \
                  else echo "==> fuzz_$$t: not in $(FUZZ_BUILD) (allreduce needs MPI): skipped" >&2; fi; \
                done

.PHONY: fuzz fuzz-build fuzz-seeds fuzz-merge

fuzz-build: deps
	@( export CC=clang; $(call configure,$(FUZZ_BUILD),$(SETUP_ARGS) -Dfuzz=true) )
	@if ! grep -q '^build tests/fuzz/fuzz_[a-z]*:' $(FUZZ_BUILD)/build.ninja; then \
	  $(MESON) configure $(FUZZ_BUILD) -Dfuzz=true; fi
	@ninja -C $(FUZZ_BUILD) build.ninja >/dev/null
	@targets=$$($(FUZZ_BUILT) | sed 's|^|tests/fuzz/fuzz_|'); \
	if [ -n "$$targets" ]; then $(MESON) compile -C $(FUZZ_BUILD) $$targets; fi

fuzz: fuzz-build
	@rc=0; \
	for t in $$($(FUZZ_BUILT) 2>/dev/null); do \
	  work=$(FUZZ_WORK)/$$t; rm -rf $$work; mkdir -p $$work/corpus $$work/artifacts; \
	  cp tests/fuzz/corpus/$$t/* $$work/corpus/; \
	  echo "==> fuzz_$$t: $(FUZZ_SECONDS) s on $$(ls $$work/corpus | wc -l) corpus inputs"; \
	  env $(ASAN_ENV) $(FUZZ_BUILD)/tests/fuzz/fuzz_$$t $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$$work/artifacts/ $(FUZZ_ARGS) $$work/corpus \
	    || { rc=1; echo "==> fuzz_$$t: FAILED; the input is in $$work/artifacts"; }; \
	done; \
	if [ $$rc -eq 0 ]; then echo "==> make fuzz: no findings"; else echo "==> make fuzz: FAILED"; fi; \
	exit $$rc

fuzz-seeds: fuzz-build
	@targets=$$($(FUZZ_BUILT) 2>/dev/null | sed 's|^|tests/fuzz/fuzz_replay_|'); \
	if [ -n "$$targets" ]; then $(MESON) compile -C $(FUZZ_BUILD) $$targets; fi
	@for t in $$($(FUZZ_BUILT) 2>/dev/null); do \
	  $(FUZZ_BUILD)/tests/fuzz/fuzz_replay_$$t --seeds tests/fuzz/corpus/$$t || exit 1; \
	done

fuzz-merge: fuzz-build
	@for t in $$($(FUZZ_BUILT) 2>/dev/null); do \
	  [ -d $(FUZZ_WORK)/$$t/corpus ] || continue; \
	  env $(ASAN_ENV) $(FUZZ_BUILD)/tests/fuzz/fuzz_$$t -merge=1 $(FUZZ_FLAGS) \
	    tests/fuzz/corpus/$$t $(FUZZ_WORK)/$$t/corpus || exit 1; \
	done

help:
	@sed -n '/^# graft/,/^$$/p' $(firstword $(MAKEFILE_LIST))
