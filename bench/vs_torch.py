#!/usr/bin/env python3
"""graft against PyTorch on the same machine, in the same run (make bench-torch).

The demo's training steps (issues 16 and 18 state their targets against
PyTorch 1.13) timed by graft's own benchmarks and by bench/torch_steps.py in
alternating rounds, so both see the same machine load:

  mlp    bench_fashion (step_ws1, batch 64)        vs torch_steps.py mlp
  cnn    bench_fashion --model cnn (step_ws1)      vs torch_steps.py cnn
  small  bench_small_step (update_on, batch 32)    vs torch_steps.py small

Every program runs at 1 thread; PyTorch with OPENBLAS_NUM_THREADS=1,
OMP_NUM_THREADS=1 and glibc's malloc kept from returning memory to the
system each step (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_), as issue
18 asks.  Per round: graft's images/s over PyTorch's (speedup, > 1: graft
faster) and graft's step time over its GEMMs called directly in the same
program (bench_fashion's ratio is the other way round: the fraction of the
GEMM bound).  Prints the median and range over the rounds; --json writes one
object per round and network too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
             "MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "268435456"}
# issue 16: images/s >= 1.5x (MLP) and 1.2x (CNN) PyTorch's; issue 18: the
# small step <= 600 us where PyTorch takes 1370 us, i.e. 2.28x its speed.
TARGET = {"mlp": 1.5, "cnn": 1.2, "small": 1370.0 / 600.0}


def run_json(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d:\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    rows = []
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def row(rows, name):
    for r in rows:
        if r.get("type", "row") == "row" and r.get("name", r.get("net")) == name:
            return r
    raise RuntimeError("no row %r in %s" % (name, rows))


def graft_round(build, reps):
    out = {}
    for net, args in (("mlp", []), ("cnn", ["--model", "cnn"])):
        rows = run_json([os.path.join(build, "bench", "bench_fashion"), "--json", "--reps",
                         str(reps)] + args)
        r = row(rows, "step_ws1")
        out[net] = {"median_us": r["median_us"], "x_gemm": 1.0 / r["ratio"]}
    rows = run_json([os.path.join(build, "bench", "bench_small_step"), "--json", "--reps",
                     str(reps * 10)])
    r = row(rows, "update_on")
    out["small"] = {"median_us": r["median_us"], "x_gemm": r["x_gemm8"]}
    return out


def torch_round(python, reps):
    rows = run_json([python, os.path.join(HERE, "torch_steps.py"), "--json", "--reps",
                     str(reps)], TORCH_ENV)
    return {r["net"]: {"median_us": r["median_us"]} for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="graft's meson build directory")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python that has PyTorch (Debian: python3-torch)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30, help="graft steps per config and round "
                    "(bench_small_step: 10x), PyTorch steps: 4x")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.rounds < 1 or a.reps < 5:
        ap.error("--rounds >= 1 and --reps >= 5")
    probe = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if probe.returncode != 0:
        sys.stderr.write("vs_torch.py: %s has no PyTorch (Debian: apt-get install "
                         "python3-torch)\n" % a.python)
        return 77
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[0]
    print("# graft vs PyTorch %s (%s), 1 thread each, %d alternating rounds; load %s"
          % (probe.stdout.strip(), a.python, a.rounds, load0))
    speed = {n: [] for n in TARGET}
    xg = {n: [] for n in TARGET}
    for i in range(a.rounds):
        # Alternate which side goes first, so neither always runs warm.
        if i % 2 == 0:
            g, t = graft_round(a.build, a.reps), torch_round(a.python, a.reps * 4)
        else:
            t = torch_round(a.python, a.reps * 4)
            g = graft_round(a.build, a.reps)
        for n in TARGET:
            s = t[n]["median_us"] / g[n]["median_us"]
            speed[n].append(s)
            xg[n].append(g[n]["x_gemm"])
            if a.json:
                print(json.dumps({"round": i, "net": n, "graft_us": g[n]["median_us"],
                                  "torch_us": t[n]["median_us"], "speedup": s,
                                  "graft_x_gemm": g[n]["x_gemm"]}))
            else:
                print("round %d  %-5s graft %9.1f us  torch %9.1f us  speedup %5.2f  graft/gemm %5.3f"
                      % (i, n, g[n]["median_us"], t[n]["median_us"], s, g[n]["x_gemm"]))
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[0]
    print("# speedup = PyTorch's step time / graft's (images/s ratio), median (range) over rounds;"
          " load at the end %s" % load1)
    print("# net    speedup            target  ok   graft step / its GEMMs")
    ok_all = True
    for n in TARGET:
        med = statistics.median(speed[n])
        ok = med >= TARGET[n]
        ok_all &= ok
        print("  %-5s  %5.2f (%4.2f-%4.2f)   >= %4.2f  %-3s  %5.3f (%5.3f-%5.3f)"
              % (n, med, min(speed[n]), max(speed[n]), TARGET[n], "yes" if ok else "no",
                 statistics.median(xg[n]), min(xg[n]), max(xg[n])))
    print("# every target met: %s" % ("yes" if ok_all else "no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
