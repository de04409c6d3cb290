#!/bin/sh
# usage: fashion_cli.sh FASHION_MNIST_PROGRAM
# The Fashion-MNIST trainer end to end, as a user runs it: one epoch of the
# MLP on the first 5,000 training images at 1 and at 2 threads must write
# byte-identical checkpoints and print the same test accuracy (over 80 %),
# and `--load CHECKPOINT --epochs 0` must print exactly that accuracy
# again.  Needs the dataset (dataset-fashion-mnist; GRAFT_FASHION_MNIST_DIR
# names another copy) and fails, saying so, without it.
set -u
prog=$1
data=${GRAFT_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
dir=$(mktemp -d "${TMPDIR:-/tmp}/graft-fashion-cli.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
for t in 1 2; do
  "$prog" --data "$data" --limit 5000 --epochs 1 --batch 8 --threads "$t" \
    --out "$dir/out$t" --save "$dir/t$t.safetensors" >"$dir/log$t" 2>&1 ||
    { cat "$dir/log$t"; fail "training at $t thread(s) failed (is dataset-fashion-mnist installed?)"; }
done
cmp "$dir/t1.safetensors" "$dir/t2.safetensors" || fail "checkpoints differ between 1 and 2 threads"
acc1=$(grep '^test accuracy:' "$dir/log1") || fail "no test accuracy in the output"
acc2=$(grep '^test accuracy:' "$dir/log2")
[ "$acc1" = "$acc2" ] || fail "1 thread: $acc1; 2 threads: $acc2"
pct=$(echo "$acc1" | sed 's/^test accuracy: \([0-9]*\)\..*/\1/')
[ "$pct" -ge 80 ] || fail "$acc1: not over 80 %"
[ -s "$dir/out1/metrics.csv" ] || fail "metrics.csv not written"
if command -v gnuplot >/dev/null 2>&1; then
  [ -s "$dir/out1/curves.png" ] || fail "gnuplot is installed but curves.png was not written"
fi
"$prog" --data "$data" --load "$dir/t1.safetensors" --epochs 0 --out "$dir/eval" >"$dir/log3" 2>&1 ||
  { cat "$dir/log3"; fail "--load failed"; }
acc3=$(grep '^test accuracy:' "$dir/log3")
[ "$acc3" = "$acc1" ] || fail "trained: $acc1; loaded: $acc3"
echo "ok: $acc1 at 1 and 2 threads (same checkpoint bytes) and after --load"
