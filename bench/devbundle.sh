#!/bin/sh
# Usage: bench/devbundle.sh [BUILD_DIR] [OUT_DIR]
#
# Packs the benchmarks of BUILD_DIR (default build-lead; they link libgraft
# statically) and every shared library they load, except glibc's own, into
# OUT_DIR (default .devbundle: bin/ and lib/), for a machine that has none of
# graft's dependencies installed: the lent 16-core machines, which a session
# reaches with the workplace's `run` tool (carry [".devbundle"], about 45 MB
# of its 64) and no network.  There:
#
#   bench/device_run.sh            (LD_LIBRARY_PATH=.devbundle/lib; see there)
#
# bench_mpi is left out (it needs mpirun).  Exit 0, or 1 with a message.
set -eu
build=${1:-build-lead}
out=${2:-.devbundle}
if [ ! -d "$build/bench" ]; then
  echo "devbundle: no $build/bench (build the benchmarks first: ninja -C $build)" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "$build"/bench/bench_*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  case "${b##*/}" in bench_mpi) continue ;; esac
  # without debug information: 3 MB each otherwise, and OpenBLAS alone
  # takes 35 of the 64 MB a run may carry
  strip --strip-debug -o "$out/bin/${b##*/}" "$b"
  # "libx.so.N => /path/libx.so.N (0x...)": every resolved library but
  # glibc's (the machine's own must match its loader).
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
    case "${lib##*/}" in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
      *) [ -f "$out/lib/${lib##*/}" ] || cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
echo "devbundle: $(ls "$out/bin" | wc -l) benchmarks, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
