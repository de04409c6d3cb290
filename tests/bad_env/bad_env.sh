#!/bin/sh
# usage: bad_env.sh PROGRAM [ARG]...
# Runs an example program once per bad GRAFT_* setting below and checks
# that it fails cleanly (exit status 1..125, no signal) with a message that
# names the variable and the value, not a bare "invalid argument".
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 PROGRAM [ARG]..." >&2
  exit 2
fi
out=$(mktemp "${TMPDIR:-/tmp}/graft-bad-env.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
rc=0
for setting in GRAFT_NUM_THREADS=abc GRAFT_SCHED=fastest GRAFT_MEMORY=lanes:0 GRAFT_BIND=maybe; do
  name=${setting%%=*}
  value=${setting#*=}
  env "$setting" "$@" >"$out" 2>&1
  status=$?
  if [ $status -eq 0 ] || [ $status -gt 125 ]; then
    echo "FAIL: $setting $*: exit status $status (expected a clean failure, 1..125)"
    rc=1
  elif ! grep -q "$name.*'$value'" "$out"; then
    echo "FAIL: $setting $*: the message does not name $name and '$value':"
    sed 's/^/    /' "$out"
    rc=1
  else
    echo "ok: $setting: $(grep "$name" "$out" | head -n 1)"
  fi
done
exit $rc
