# graft: a thin wrapper over meson.  Everything real lives in meson.build;
# this file only saves typing and installs the Debian packages graft needs.
#
#   make                 configure (first time) and build in ./build
#   make test            tests in ./build, then again in ./build-asan
#                        (AddressSanitizer + UBSan); fails if either fails
#   make stress          the `stress` suite only (left out of `make test`)
#   make demo            build and run examples/quickstart (writes quickstart.dot here)
#   make bench           build and run every bench/bench_* program
#   make install         meson install (PREFIX=/usr/local, DESTDIR honoured)
#   make clean           remove both build directories and quickstart.dot
#   make deps            install missing Debian packages (root) or say how
#
# Variables: BUILD, ASAN_BUILD, PREFIX, SUITES="graph sched" (--suite each),
# MESON_TEST_ARGS, MESON_SETUP_ARGS, BENCH_ARGS (e.g. --json),
# STRESS_COUNT (sets -Dstress_count), NO_DEPS=1 (skip the package check).

MESON           ?= meson
BUILD           ?= build
ASAN_BUILD      ?= build-asan
PREFIX          ?= /usr/local
SUITES          ?=
MESON_TEST_ARGS ?=
MESON_SETUP_ARGS ?=
BENCH_ARGS      ?=
STRESS_COUNT    ?=
NO_DEPS         ?=

DEB_PACKAGES := gcc pkg-config meson ninja-build libopenblas-dev libhwloc-dev libcmocka-dev

SETUP_ARGS      := --prefix=$(PREFIX) $(MESON_SETUP_ARGS)
ASAN_SETUP_ARGS := $(SETUP_ARGS) -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug

# The stress suite is opt-in: left out unless SUITES names it.
SUITE_ARGS := $(foreach s,$(SUITES),--suite $(s)) \
              $(if $(filter stress,$(SUITES)),,--no-suite stress)
TEST_ARGS  := --print-errorlogs -v $(SUITE_ARGS) $(MESON_TEST_ARGS)

LSAN_SUPP := $(CURDIR)/tests/lsan.supp
ASAN_ENV  := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
             $(if $(wildcard $(LSAN_SUPP)),LSAN_OPTIONS=suppressions=$(LSAN_SUPP):print_suppressions=0)

# A user-given PREFIX also applies to an already configured build directory.
ifneq ($(filter command line environment,$(origin PREFIX)),)
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

# $(call build_and_test,DIR,SETUP_ARGS,ENV): configure, compile, test; the
# status of the first step that fails.
define build_and_test
( $(call configure,$(1),$(2)) && \
  $(MESON) compile -C $(1) && \
  rm -f $(1)/meson-logs/testlog.json && \
  env $(3) $(MESON) test -C $(1) $(TEST_ARGS) )
endef

.PHONY: all build deps test stress demo bench install clean help

all: build

build: deps
	@$(call configure,$(BUILD),$(SETUP_ARGS))
	$(if $(RECONFIGURE_PREFIX),$(MESON) configure $(BUILD) --prefix=$(PREFIX))
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
	if [ $$rc -eq 0 ]; then echo "==> make test: all passed"; else echo "==> make test: FAILED"; fi; \
	exit $$rc

stress: build
	$(MESON) test -C $(BUILD) --print-errorlogs -v --suite stress $(MESON_TEST_ARGS)

demo: build
	$(BUILD)/examples/quickstart

bench: build
	@rc=0; found=0; \
	for b in $(BUILD)/bench/bench_*; do \
	  if [ -f "$$b" ] && [ -x "$$b" ]; then \
	    found=1; echo "==> $$b $(BENCH_ARGS)"; "$$b" $(BENCH_ARGS) || rc=1; \
	  fi; \
	done; \
	if [ $$found -eq 0 ]; then echo "graft: no benchmarks in $(BUILD)/bench"; fi; \
	exit $$rc

install: build
	$(MESON) install -C $(BUILD) $(if $(DESTDIR),--destdir "$(DESTDIR)")

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) quickstart.dot

help:
	@sed -n '/^# graft/,/^$$/p' $(firstword $(MAKEFILE_LIST))
