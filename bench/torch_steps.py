#!/usr/bin/env python3
"""PyTorch baselines for the demo's training steps (bench/vs_torch.sh runs it).

Times one training step (forward, backward, Adam) of the networks that
graft's benchmarks time, written the way a PyTorch user writes them:

  mlp        the demo's MLP 784-256-128-10, batch 64 (bench_fashion)
  cnn        the demo's CNN conv32-pool-conv64-pool-128-10, batch 64
             (bench_fashion --model cnn)
  small      the demo's MLP at batch 32 (bench_small_step)

on synthetic inputs, f32, torch.set_num_threads(--threads).  Prints one
line per network: its median and minimum microseconds per step and images
per second, or with --json one JSON object per line.  PyTorch's allocator
returns large temporaries to glibc every step; run it with
MALLOC_MMAP_THRESHOLD_ set (bench/vs_torch.sh does) or its steps pay page
faults that graft's (which allocate nothing per call) do not.
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.stderr.write("torch_steps.py: PyTorch is not installed "
                     "(Debian: apt-get install python3-torch)\n")
    sys.exit(77)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Linear(128, 10))


NETS = {"mlp": (mlp, 64), "cnn": (cnn, 64), "small": (mlp, 32)}


def time_steps(name, reps, warm):
    build, batch = NETS[name]
    torch.manual_seed(1)
    net = build()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warm):
        step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times) * 1e6
    return {"net": name, "batch": batch, "threads": torch.get_num_threads(), "reps": reps,
            "median_us": med, "min_us": min(times) * 1e6, "images_per_s": batch / med * 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("nets", nargs="*", default=["mlp", "cnn", "small"])
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or a.warm < 0:
        ap.error("--threads and --reps must be >= 1, --warm >= 0")
    for n in a.nets:
        if n not in NETS:
            ap.error("unknown network %r (one of %s)" % (n, ", ".join(NETS)))
    torch.set_num_threads(a.threads)
    print("# torch %s, %d thread(s), MKL-DNN %s" % (torch.__version__, torch.get_num_threads(),
                                                    torch.backends.mkldnn.is_available()))
    for n in a.nets:
        r = time_steps(n, a.reps, a.warm)
        if a.json:
            print(json.dumps(r))
        else:
            print("%-6s batch %3d  median %9.1f us  min %9.1f us  %8.0f images/s"
                  % (n, r["batch"], r["median_us"], r["min_us"], r["images_per_s"]))


if __name__ == "__main__":
    main()
