#!/usr/bin/python3
"""A language model's head and its loss, forward + backward: loom fused and unfused
(bench/bench_lm_head) beside PyTorch's F.cross_entropy(F.linear(x, w, b), t) on the same shapes,
one thread each, median of --reps timed rounds after 2 warm-up ones, each framework and case in
a fresh process, the two frameworks one after the other per case (the small case ran ~30% slower
right after the large one, in one process or not). PyTorch runs with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset when its float result matches double (checked
here), loom with the same setting; the table says which ran.

  scripts/bench_lm_head.py [--loom build/bench/bench_lm_head] [--reps 7]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {  # name: (rows N, inner K, classes V, bias) — as bench/bench_lm_head.cpp
    "head_v1000": (1024, 256, 1000, True),
    "head_v32000": (2048, 256, 32000, False),
}
OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def torch_case(name, reps):
    """Runs in a fresh process (the environment is read when OpenBLAS loads)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    n, k, v, bias = CASES[name]
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(n, k, generator=g) * 2 - 1).requires_grad_()
    w = (torch.randn(v, k, generator=g) * k ** -0.5).requires_grad_()
    b = torch.zeros(v, requires_grad=True) if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    # float against double on the same values: is this BLAS setting correct here?
    ref = F.cross_entropy(F.linear(x.double(), w.double(), None if b is None else b.double()), t)
    got = F.cross_entropy(F.linear(x, w, b), t)
    ok = abs(got.item() - ref.item()) <= 1e-4 * abs(ref.item())
    times = []
    for r in range(reps + 2):
        t0 = time.perf_counter()
        loss = F.cross_entropy(F.linear(x, w, b), t)
        loss.backward()
        if r >= 2:
            times.append(time.perf_counter() - t0)
        x.grad = w.grad = None
        if b is not None:
            b.grad = None
    print(json.dumps({"case": name, "ms": 1e3 * statistics.median(times), "correct": ok}))


def run_torch(name, reps, unset):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if unset:
        for key in OVERRIDES:
            env.pop(key, None)
    out = subprocess.run([sys.executable, __file__, "--torch-case", name, "--reps", str(reps)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/bench/bench_lm_head")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--torch-case")
    a = ap.parse_args()
    if a.torch_case:
        return torch_case(a.torch_case, a.reps)
    unset = all(run_torch(name, 1, True)["correct"] for name in CASES)
    env = dict(os.environ)
    if unset:
        for key in OVERRIDES:
            env.pop(key, None)
    setting = "unset" if unset else "as the environment sets them (unset gave a wrong result)"
    print(f"OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: {setting}; 1 thread; median of {a.reps}")
    print("| case | loom fused ms | loom unfused ms | PyTorch ms | fused / PyTorch speed | peak MiB fused / unfused |")
    print("|---|---|---|---|---|---|")
    for name in CASES:
        loom = subprocess.run([a.loom, "--threads", "1", "--reps", str(a.reps), "--case", name], env=env, check=True,
                              capture_output=True, text=True).stdout
        rows = {r["variant"]: r for r in map(json.loads, loom.strip().splitlines())}
        t = run_torch(name, a.reps, unset)
        f, u = rows["fused"], rows["unfused"]
        print(f"| {name} | {f['ms']:.1f} | {u['ms']:.1f} | {t['ms']:.1f} | {t['ms'] / f['ms']:.2f}x | "
              f"{f['peak_mib']:.1f} / {u['peak_mib']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
