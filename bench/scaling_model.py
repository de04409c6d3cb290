#!/usr/bin/env python3
"""The alpha-beta-gamma model of docs/scaling.md, from bench_mpi's rows.

  scaling_model.py RESULTS.jsonl [MORE.jsonl ...]

Each file holds bench_mpi's --json lines of one run (`make bench` collects
them in build/bench-results.jsonl; `mpirun -np 2 bench_mpi --json > F`
writes them alone); with several runs every figure is the median of the
runs' (a shared machine's noise).  Prints, as markdown: the check of the model against the
2-rank measurement (the all-reduce of each bucket layout predicted from
alpha and beta fitted to two message sizes, against the measured plain-MPI
buckets and graft's all-reduce function; the data-parallel step predicted
from the measured compute, against the measured step), then the
predicted scaling efficiency of two models over two interconnects for 2
to 1,024 nodes.

Ring all-reduce of n bytes over p ranks (Patarasuk and Yuan; Thakur,
Rabenseifner and Gropp):
    T(n, p) = 2 (p - 1) alpha + 2 (p - 1) / p * n * beta + (p - 1) / p * n * gamma
per bucket, summed over the buckets.  Weak scaling: every rank keeps its
128 rows, so the compute per step t_c stays the measured one.  The
exposed communication is T - min(h T, t_bwd): the fraction h hidden
behind the backward pass as measured at 2 ranks, but never more than the
backward pass lasts (t_bwd = its share of the step's flops, 2/3, times
t_c); efficiency = t_c / (t_c + exposed).  T also counts graft's own
copies of each bucket (delta per byte: packing, the mean, the staged
commit), measured at 2 ranks as graft's all-reduce function minus the same
buckets as plain MPI_Iallreduce calls.
"""
import json
import statistics
import sys

RANKS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
MIB = 1 << 20
ROWS = 128  # per rank, bench_mpi's B / 2
BWD_SHARE = 2.0 / 3.0  # of an MLP step's flops: dW and dX against the forward

# Typical published figures (docs/scaling.md says where they come from).
NETWORKS = [
    ("InfiniBand HDR (200 Gb/s)", 1.5e-6, 1 / 25e9),
    ("25 GbE, TCP", 25e-6, 1 / 3.125e9),
]


def mlp_params(dims):
    """(weights and biases in variable order W1, b1, ..., their byte sizes)."""
    sizes = []
    for a, b in zip(dims, dims[1:]):
        sizes += [4 * a * b, 4 * b]
    return sizes


def mlp_flops(dims, rows):
    """Matmul flops of a training step: forward, dW of every layer, dX of all
    but the first."""
    prods = [a * b for a, b in zip(dims, dims[1:])]
    return 2 * rows * (2 * sum(prods) + sum(prods[1:]))


def buckets(sizes, cap):
    """graft's buckets (graft/mpi.h): from the last variable back, a value
    joins the bucket unless it would pass cap, a larger one goes alone."""
    out, held = [], 0
    for n in reversed(sizes):
        if out and held + n > cap:
            held = 0
        if held == 0:
            out.append(0)
        out[-1] += n
        held += n
    return out


def ring(nbytes, p, alpha, beta, gamma):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta + (p - 1) / p * nbytes * gamma


def load_one(path):
    rows, overlap, fit = {}, {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if o.get("bench", "bench_mpi") != "bench_mpi":
                continue
            if o.get("type") == "row":
                rows[(o["name"], o.get("bucket_mib"), o.get("bytes"))] = o
            elif o.get("type") == "overlap":
                overlap[o["bucket_mib"]] = o
            elif o.get("type") == "alpha_beta":
                fit = o
    if not fit or not overlap or ("compute", None, None) not in rows:
        raise SystemExit("scaling_model.py: %s holds no bench_mpi rows (run it with --json)" % path)
    return rows, overlap, fit


def median_of(dicts):
    """One dict: each numeric field the median over dicts, the rest the first's."""
    out = dict(dicts[0])
    for k, v in out.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = statistics.median(d[k] for d in dicts)
    return out


def load(paths):
    runs = [load_one(p) for p in paths]
    rows = {k: median_of([r[0][k] for r in runs]) for k in runs[0][0]}
    overlap = {k: median_of([r[1][k] for r in runs]) for k in runs[0][1]}
    fit = median_of([r[2] for r in runs])
    return rows, overlap, fit, len(runs)


def fmt_us(s):
    return "%.0f" % (s * 1e6) if s >= 1e-4 else "%.1f" % (s * 1e6)


def check(rows, overlap, fit, sizes):
    """The model against the 2-rank measurement: every mpi_allreduce size from
    alpha and beta fitted to the smallest and largest; each bucket layout
    against plain MPI_Iallreduce and graft; the step with and without
    overlap."""
    a, b = fit["alpha_us"] * 1e-6, fit["beta_ns_per_byte"] * 1e-9
    p = fit["ranks"]
    tc = rows[("compute", None, None)]["median_us"] * 1e-6
    print("Fit on this machine (%d ranks, shared memory, blocking MPI_Allreduce at %d and %d "
          "bytes): alpha = %.2f us, beta = %.4f ns/byte (%.2f GB/s; it includes the reduction); "
          "gamma (reduce_c, one core) = %.4f ns/byte; compute t_c = %.1f ms.\n"
          % (p, fit["from_bytes"][0], fit["from_bytes"][1], fit["alpha_us"],
             fit["beta_ns_per_byte"], fit["bandwidth_gb_s"], fit["gamma_ns_per_byte"], tc * 1e3))
    print("| bytes | model (us) | measured MPI_Allreduce (us) | measured / model |")
    print("|---|---|---|---|")
    for (name, _, nbytes), r in sorted(rows.items(), key=lambda kv: kv[0][2] or 0):
        if name != "mpi_allreduce":
            continue
        t = ring(nbytes, p, a, b, 0.0)
        print("| %d | %.1f | %.1f | %.2f |" % (nbytes, t * 1e6, r["median_us"], r["median_us"] / (t * 1e6)))
    print()
    print("| bucket | buckets | model (ms) | mpi_buckets: MPI_Iallreduce (ms) | graft allreduce (ms) "
          "| t_c + model (ms) | measured step_dp (ms) | hidden h |")
    print("|---|---|---|---|---|---|---|---|")
    for mib in sorted(overlap):
        bs = buckets(sizes, mib * MIB)
        t = sum(ring(n, p, a, b, 0.0) for n in bs)
        ov = overlap[mib]
        print("| %g MiB | %d | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f |" % (
            mib, len(bs), t * 1e3, ov["mpi_buckets_us"] * 1e-3, ov["allreduce_us"] * 1e-3,
            (tc + t) * 1e3, ov["step_dp_us"] * 1e-3, ov["hidden"]))
    print()


def exposed_eff(t, tc, h):
    """Efficiency t_c / (t_c + exposed): h of the all-reduce t hidden, at most
    the backward pass's share of t_c."""
    return tc / (tc + t - min(h * t, BWD_SHARE * tc))


def allreduce_time(bs, p, alpha, beta, gamma, delta, tree=False):
    """The buckets bs over p ranks, and graft's own copies (delta per byte);
    tree: recursive halving and doubling's latency term, 2 log2(p) alpha."""
    t = 0.0
    for n in bs:
        t += ring(n, p, alpha, beta, gamma) + n * delta
        if tree:
            t -= 2 * (p - 1) * alpha - 2 * (p.bit_length() - 1) * alpha
    return t


def print_head(first, per_net):
    """A table's header: first, then two columns per network (per_net names
    them, %s the network)."""
    print("| %s |" % first + "".join(" %s |" % (per_net % net) for net, _, _ in NETWORKS))
    print("|---|" + "---|---|" * len(NETWORKS))


def scaling(name, sizes, tc, h, gamma, delta, cap):
    bs = buckets(sizes, cap)
    total = sum(sizes)
    print("%s: %.2f M parameters, %.1f MB of gradients in %d bucket(s) of at most %g MiB; "
          "t_c = %.1f ms a step.\n" % (name, total / 4e6, total / 1e6, len(bs), cap / MIB, tc * 1e3))
    print_head("nodes", "%s: all-reduce (ms) | efficiency")
    for p in RANKS:
        line = "| %d |" % p
        for _, a, b in NETWORKS:
            t = allreduce_time(bs, p, a, b, gamma, delta)
            line += " %.2f | %.0f%% |" % (t * 1e3, 100 * exposed_eff(t, tc, h))
        print(line)
    print()
    print("Efficiency at 64 and 1,024 nodes when one assumption changes:\n")
    alt = 4 if cap == 25 * MIB else 25
    cases = [("as above", tc, h, delta, bs, False),
             ("no overlap (h = 0)", tc, 0.0, delta, bs, False),
             ("h = 0.5 (the target)", tc, 0.5, delta, bs, False),
             ("no copies in graft (delta = 0)", tc, h, 0.0, bs, False),
             ("compute 10x faster (a many-core node)", tc / 10, h, delta, bs, False),
             ("compute 10x faster, delta = 0, h = 0.5", tc / 10, 0.5, 0.0, bs, False),
             ("%g MiB buckets" % alt, tc, h, delta, buckets(sizes, alt * MIB), False),
             ("latency 2 log2(p) alpha (halving-doubling)", tc, h, delta, bs, True)]
    print_head("assumption", "%s: 64 | 1,024")
    for label, c, hh, d, bb, tree in cases:
        line = "| %s |" % label
        for _, a, b in NETWORKS:
            for p in (64, 1024):
                line += " %.0f%% |" % (100 * exposed_eff(allreduce_time(bb, p, a, b, gamma, d, tree), c, hh))
        print(line)
    print()


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    rows, overlap, fit, runs = load(argv[1:])
    print("Medians of %d run%s of bench_mpi.\n" % (runs, "" if runs == 1 else "s"))
    mlp = [784, 1024, 1024, 10]
    sizes = mlp_params(mlp)
    check(rows, overlap, fit, sizes)
    tc = rows[("compute", None, None)]["median_us"] * 1e-6
    gamma = fit["gamma_ns_per_byte"] * 1e-9
    # the bucket size whose 2-rank step ran fastest: its hidden fraction, and
    # graft's copies (its all-reduce function over the plain MPI buckets)
    best = min(overlap, key=lambda mib: overlap[mib]["step_dp_us"])
    ov = overlap[best]
    h = ov["hidden"]
    delta = max(0.0, (ov["allreduce_us"] - ov["mpi_buckets_us"]) * 1e-6 / sum(sizes))
    print("Measured at 2 ranks with %g MiB buckets (the fastest step): hidden h = %.2f; graft's "
          "own copies (its all-reduce function minus the same MPI_Iallreduce buckets) delta = "
          "%.3f ns/byte; gamma = %.3f ns/byte.\n" % (best, h, delta * 1e9, gamma * 1e9))
    scaling("bench_mlp's MLP %s, %d rows a rank" % ("-".join(map(str, mlp)), ROWS), sizes, tc, h,
            gamma, delta, best * MIB)
    big = [784, 4096, 4096, 1024, 10]
    tc_big = tc * mlp_flops(big, ROWS) / mlp_flops(mlp, ROWS)
    scaling("A dense MLP %s, %d rows a rank (compute scaled by its flops)"
            % ("-".join(map(str, big)), ROWS), mlp_params(big), tc_big, h, gamma, delta,
            25 * MIB)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
