#!/bin/sh
# usage: fashion_mpi.sh FASHION_MNIST_PROGRAM [MPIRUN]
# The trainer's --mpi (data-parallel training) end to end.  Without MPIRUN
# (graft built without MPI, or no mpirun) --mpi must be refused with exit
# status 2 and a message that says so.  With it:
#  * one rank (the program started without mpirun: MPI's singleton) writes
#    the very checkpoint bytes of the run without --mpi, since the mean
#    over one rank changes no gradient;
#  * two ranks under mpirun at the same global batch train (each on half
#    of every batch), report that every rank holds the same bits, print
#    the results once (rank 0 alone), write metrics.csv, and reach the
#    single-process test accuracy within one point (only the order of the
#    float sums differs);
#  * a batch that does not split into equal shares is refused.
# Needs the dataset (dataset-fashion-mnist; GRAFT_FASHION_MNIST_DIR names
# another copy) and fails, saying so, without it.
set -u
prog=$1
mpirun=${2:-}
data=${GRAFT_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
dir=$(mktemp -d "${TMPDIR:-/tmp}/graft-fashion-mpi.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
args="--data $data --limit 2000 --epochs 1 --batch 8 --threads 1"

if [ -z "$mpirun" ]; then
  "$prog" $args --mpi --out "$dir/out" >"$dir/log" 2>&1
  status=$?
  cat "$dir/log"
  [ $status -eq 2 ] || fail "--mpi without MPI: exit status $status (expected 2)"
  grep -q 'built without MPI' "$dir/log" || fail "--mpi without MPI: the message does not say why"
  echo "ok: --mpi refused in a build without MPI"
  exit 0
fi

"$prog" $args --out "$dir/plain" --save "$dir/plain.safetensors" >"$dir/log1" 2>&1 ||
  { cat "$dir/log1"; fail "the run without --mpi failed (is dataset-fashion-mnist installed?)"; }
"$prog" $args --mpi --out "$dir/one" --save "$dir/one.safetensors" >"$dir/log2" 2>&1 ||
  { cat "$dir/log2"; fail "--mpi on one rank (singleton) failed"; }
cmp "$dir/plain.safetensors" "$dir/one.safetensors" ||
  fail "one rank with --mpi wrote another checkpoint than the run without it"

"$mpirun" -np 2 --oversubscribe --bind-to none "$prog" $args --mpi --out "$dir/two" \
  >"$dir/log3" 2>&1 || { cat "$dir/log3"; fail "two ranks under mpirun failed"; }
cat "$dir/log3"
grep -q '^replicas: every rank holds the same bits' "$dir/log3" ||
  fail "two ranks: no replica check in the output"
[ "$(grep -c '^test accuracy:' "$dir/log3")" -eq 1 ] ||
  fail "two ranks: the results are not printed once (rank 0 alone)"
[ -s "$dir/two/metrics.csv" ] || fail "two ranks: metrics.csv not written"
# test accuracy in hundredths of a percent, e.g. 81.36% -> 8136
hundredths() {
  grep '^test accuracy:' "$1" | sed 's/^test accuracy: \([0-9]*\)\.\([0-9]*\)%.*/\1\2/'
}
a1=$(hundredths "$dir/log1")
a2=$(hundredths "$dir/log3")
[ -n "$a1" ] && [ -n "$a2" ] || fail "no test accuracy in the output"
diff=$((a2 - a1))
[ $diff -ge -100 ] && [ $diff -le 100 ] ||
  fail "two ranks: test accuracy $a2 vs one process $a1 (hundredths of a percent): over a point apart"

"$mpirun" -np 2 --oversubscribe --bind-to none "$prog" $args --batch 7 --mpi --out "$dir/odd" \
  >"$dir/log4" 2>&1 && fail "--batch 7 on two ranks was accepted"
grep -q 'does not split into 2 equal shares' "$dir/log4" ||
  { cat "$dir/log4"; fail "--batch 7 on two ranks: the message does not say why"; }
echo "ok: one rank = no --mpi (same checkpoint bytes); two ranks: replicas equal, test accuracy $a2 vs $a1 (hundredths of a percent)"
