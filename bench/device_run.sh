#!/bin/sh
# Usage: bench/device_run.sh [THREADS]   (default 16)
#
# The thread-scaling checks for a lent many-core machine, from the bundle
# bench/devbundle.sh made (.devbundle), each under a time limit so that the
# whole run fits one `run` call of the workplace's device tool (under 9
# minutes).  Writes each program's text output to $OUT (the tool's folder
# that comes back) or to ./device-out, and prints the rows that carry
# targets.  What it runs:
#   bench_mlp --threads N        issue 18: the step within 1.15x of each GEMM
#                                split N ways under omp parallel for; default
#                                OpenBLAS kernels, then OPENBLAS_CORETYPE=SkylakeX
#   bench_small_step             the small step on that machine (1 thread)
#   bench_branches --grain 16384 16 independent MLP branches, ws vs omp for
#   bench_dag --threads N        scheduling cost per node at N threads
set -u
n=${1:-16}
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=$here/.devbundle
out=${OUT:-$here/device-out}
mkdir -p "$out"
if [ ! -d "$bundle/bin" ]; then
  echo "device_run: no $bundle/bin (run bench/devbundle.sh here first, then carry .devbundle)" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ nproc; lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)|L2|L3'; uptime; } \
  >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
rc=0
# step NAME LIMIT_S PATTERN COMMAND...: run it, keep its output, print the
# lines matching PATTERN (an extended regex).
step() {
  name=$1 limit=$2 pat=$3
  shift 3
  echo "==> $name: $*"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1 || { echo "==> $name: exit $?"; rc=1; }
  grep -E "$pat" "$out/$name.txt" | head -40
}
mlp='^(step |step_chain|gemm_chain|gemm_omp[0-9]*_(sum|chain)|check)'
step mlp_default 150 "$mlp" "$bundle/bin/bench_mlp" --threads "$n" --reps 7
OPENBLAS_CORETYPE=SkylakeX step mlp_skylakex 150 "$mlp" "$bundle/bin/bench_mlp" --threads "$n" --reps 7
step small_step 60 '^  (update_on|ops_on|gemm8) |^check' "$bundle/bin/bench_small_step" --reps 200
step branches 90 '^branches' "$bundle/bin/bench_branches" --reps 15 --grain 16384
step dag 120 '^[a-z]+ +1000000 ' "$bundle/bin/bench_dag" --reps 5 --threads "$n"
exit $rc
