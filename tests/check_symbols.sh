#!/bin/sh
# Usage: check_symbols.sh path/to/libgraft.so
#
# Fails if the shared library exports a symbol outside the public tier: every
# defined dynamic symbol must start with graft_, and none may start with
# graft__ (the internal tier is built with hidden visibility).  Linker-made
# symbols (_init, _end, ...) are ignored.  Exit 0 ok, 1 offenders, 2 usage or
# tool error.
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/libgraft.so" >&2
  exit 2
fi
lib=$1
if [ ! -f "$lib" ]; then
  echo "check_symbols: no such file: $lib" >&2
  exit 2
fi

NM=${NM:-nm}
if ! syms=$("$NM" -D --defined-only "$lib"); then
  echo "check_symbols: $NM -D --defined-only $lib failed" >&2
  exit 2
fi

# nm prints "ADDRESS TYPE NAME" (NAME may carry @VERSION).  Keep the global
# kinds: text, data, bss, read-only, weak, weak object, indirect function,
# unique global.
result=$(printf '%s\n' "$syms" | awk '
  NF >= 3 && $2 ~ /^[TDBRWViu]$/ {
    name = $3
    sub(/@.*/, "", name)
    if (name ~ /^(_init|_fini|_edata|_end|__bss_start|__bss_start__|_bss_end__|__bss_end__|__end__)$/)
      next
    if (name ~ /^graft__/ || name !~ /^graft_/)
      bad[++nbad] = $2 " " name
    else
      good++
  }
  END {
    printf "%d\n", good + 0
    for (i = 1; i <= nbad; i++) print bad[i]
  }')

n_good=$(printf '%s\n' "$result" | head -n 1)
offenders=$(printf '%s\n' "$result" | tail -n +2)

if [ -n "$offenders" ]; then
  echo "check_symbols: $lib exports symbols outside graft_ (or in the internal graft__ tier):" >&2
  printf '%s\n' "$offenders" | sed 's/^/  /' >&2
  exit 1
fi
if [ "$n_good" -eq 0 ]; then
  echo "check_symbols: $lib exports no graft_ symbol at all (GRAFT_API missing?)" >&2
  exit 1
fi
echo "check_symbols: $n_good exported symbols, all graft_"
exit 0
