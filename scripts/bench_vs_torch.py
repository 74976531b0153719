#!/usr/bin/python3
"""loom side by side with PyTorch: the same cases, shapes, data, threads and timing protocol.

Runs every case of bench/bench_vs_torch.cpp once per framework and thread count, each in a
fresh process (loom: that binary with --json; PyTorch: this script with --torch-case), waiting
for idle CPUs between runs, and prints one markdown table of median times with the ratio
PyTorch time / loom time (> 1: loom is faster), then peak memory and GFLOP/s of the training
steps. The table also goes to BUILD_DIR/bench_vs_torch.md (raw results: bench_vs_torch.json).

  scripts/bench_vs_torch [--quick] [--threads 1,2] [--cases REGEX] [--torch-threading NAME]
  /usr/bin/python3 scripts/bench_vs_torch.py --binary BUILD_DIR/bench/bench_vs_torch [same flags]
  /usr/bin/python3 scripts/bench_vs_torch.py --torch-case NAME --threads N [--quick]   (one JSON line)
  /usr/bin/python3 scripts/bench_vs_torch.py --torch-sweep      (PyTorch threading settings compared)

PyTorch 1.13 (Debian's build: ATen on OpenMP/libgomp, BLAS = the system's OpenBLAS pthread
build, the same library loom calls) must be importable by /usr/bin/python3.

OpenBLAS runs for both frameworks with the setting under which torch.mm is fastest and correct
(checked against float64 at the start of the run): the environment's OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE (which some machines set for older OpenBLAS builds, forcing its AVX2 kernels),
OpenBLAS's own core detection (which may not know a newer CPU), or OPENBLAS_CORETYPE set to the
core the CPU's instructions fit; --blas-env inherit|unset forces the environment's or its own.
The table says which setting ran and what the check measured.
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from bench_ort_cases import ORT_VERSION, ort_cases, ort_missing, run_ort_case  # noqa: E402
from bench_report import fmt_time, report, seconds  # noqa: E402 (beside this script)
from bench_torch_cases import (LOOM_ONLY, THREADING, blas_threads, case_flop, case_names,  # noqa: E402
                               default_threading, run_torch_case)


# ---------------------------------------------------------------- the driver

def cpu_times():
    """(non-idle, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def cpu_busy(interval=1.0):
    """Percent of CPU time (all CPUs) not idle over `interval` seconds."""
    b0, t0 = cpu_times()
    time.sleep(interval)
    b1, t1 = cpu_times()
    return 100.0 * (b1 - b0) / max(1, t1 - t0)


def wait_until_idle(max_seconds, threshold=10.0):
    """Waits until two successive 0.5-s samples are under `threshold` % busy, or max_seconds pass.
    Returns the last sample."""
    deadline = time.monotonic() + max_seconds
    quiet, busy = 0, cpu_busy(0.5)
    while quiet < 2 and time.monotonic() < deadline:
        quiet = quiet + 1 if busy < threshold else 0
        if quiet < 2:
            busy = cpu_busy(0.5)
    return busy


def run_measured(cmd, env=None):
    """Runs one benchmark process; returns its JSON line (dict) with `others_busy_pct`: the
    share of all CPUs used by other processes while it ran."""
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0, _ = cpu_times()
    w0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - w0
    b1, _ = cpu_times()
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"bench_vs_torch: {' '.join(cmd)} failed (exit {proc.returncode})")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    r = json.loads(lines[-1])
    ours = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    r["others_busy_pct"] = max(0.0, 100.0 * ((b1 - b0) / hz - ours) / (ncpu * wall))
    r["process_wall_s"] = wall
    return r


def git_commit(root):
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def cpu_model():
    """The CPU's name, family and model, and whether it has the instructions loom's reduced
    precision uses (AVX512_BF16 for bf16 products, AVX512_VNNI for int8 weights)."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    flags = fields.get("flags", "").split()
    has = lambda f: "with" if f in flags else "without"  # noqa: E731
    return (f"{fields.get('model name', 'unknown CPU')} (CPU family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')}; {has('avx512_bf16')} AVX512_BF16, {has('avx512_vnni')} AVX512_VNNI)")


def loadavg():
    with open("/proc/loadavg") as f:
        return ", ".join(f.read().split()[:3])


def parse_settings(text):
    names = text.split(",")
    for name in names:
        if name not in THREADING:
            raise SystemExit(f"bench_vs_torch: no PyTorch threading setting {name!r} (one of {', '.join(THREADING)})")
    return names


class Idle:
    """Waits for idle CPUs before each run: at most max_wait seconds per run and budget seconds in all."""

    def __init__(self, max_wait, budget):
        self.max_wait, self.left = max_wait, budget

    def wait(self):
        if self.max_wait <= 0:
            return None
        t0 = time.monotonic()
        busy = wait_until_idle(min(self.max_wait, max(0.0, self.left)))
        self.left -= time.monotonic() - t0
        return busy


# OpenBLAS settings some machines put in the environment for older OpenBLAS builds: they force
# its AVX2 kernels, which halves PyTorch's GEMM speed on CPUs with full-width AVX-512.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

BLAS_CHECK = """
import json, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
c = torch.mm(a, b)
ref = torch.mm(a.double(), b.double())
err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
times = []
for _ in range(5):
    t0 = time.perf_counter(); torch.mm(a, b); times.append(time.perf_counter() - t0)
print(json.dumps({"rel_err": err, "gflops": 2 * 1024 ** 3 / sorted(times)[2] / 1e9}))
"""


# OPENBLAS_CORETYPE values tried beside OpenBLAS's own detection, by the CPU's instructions:
# OpenBLAS 0.3.21 does not recognise every newer CPU (an Intel Xeon, family 6 model 207, got its
# SSE3 kernel, 31 GFLOP/s at 1024³ against 138 with SkylakeX), so its own choice may not be its best.
CORE_CANDIDATES = (("avx512f", "SkylakeX"), ("avx2", "Haswell"))


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def blas_check(env):
    """torch.mm 1024³ at 1 thread in `env`: {"rel_err", "gflops"}, or None when it failed."""
    one = {**env, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", BLAS_CHECK], capture_output=True, text=True, env=one)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if proc.returncode == 0 and lines else None


def blas_environment(choice):
    """The environment both frameworks run in, and a sentence for the table. With `auto`, the
    OpenBLAS setting under which torch.mm (1024³, float32, 1 thread, the same OpenBLAS loom calls)
    is fastest while correct against float64 (max error ≤ 1e-4 of the largest element), among: the
    environment's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE if it sets them, OpenBLAS's own detection (both
    removed), and OPENBLAS_CORETYPE set to the core the CPU's instructions fit (CORE_CANDIDATES).
    Its own detection is kept unless another is more than 3% faster. `inherit` and `unset` force
    the environment's setting or its removal."""
    inherited = dict(os.environ)
    unset = {k: v for k, v in os.environ.items() if k not in BLAS_OVERRIDES}
    given = ", ".join(f"{k}={os.environ[k]}" for k in BLAS_OVERRIDES if k in os.environ)
    if choice == "inherit":
        return inherited, (f"OpenBLAS with the environment's {given} (--blas-env inherit)" if given else
                           "OpenBLAS with its own core detection (--blas-env inherit; no override in the environment)")
    if choice == "unset":
        return unset, ("OpenBLAS with its own core detection (--blas-env unset" +
                       (f"; {given} removed)" if given else ")"))
    options = [("its own core detection", unset)]
    if given:
        options.append((f"the environment's {given}", inherited))
    flags = cpu_flags()
    for flag, core in CORE_CANDIDATES:
        if flag in flags and os.environ.get("OPENBLAS_CORETYPE") != core:
            options.append((f"OPENBLAS_CORETYPE={core}", {**unset, "OPENBLAS_CORETYPE": core}))
    checks = [(label, env, blas_check(env)) for label, env in options]
    def said(c):
        return "failed to run" if c is None else f"{c['gflops']:.0f} GFLOP/s, max error {c['rel_err']:.1e}"
    detail = "torch.mm 1024³ at 1 thread: " + "; ".join(f"{label} {said(c)}" for label, _, c in checks)
    good = [(label, env, c) for label, env, c in checks if c is not None and c["rel_err"] <= 1e-4]
    if not good:
        return inherited, f"OpenBLAS as the environment has it: no setting gave a correct torch.mm ({detail})"
    best = max(good, key=lambda t: t[2]["gflops"])
    own = next((t for t in good if t[1] is unset), None)
    if own is not None and own[2]["gflops"] >= best[2]["gflops"] / 1.03:
        best = own
    return best[1], f"OpenBLAS with {best[0]} for both, the fastest correct setting ({detail})"


def prepare_out_dir(out_dir):
    """Creates the output folder and proves it writable, before a run of many minutes (not after)."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".bench_vs_torch-write-test-"):
            pass
    except OSError as e:
        raise SystemExit(f"bench_vs_torch: cannot write to --out-dir {out_dir!r}: {e.strerror or e}")
    return out_dir


def drive(args):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = args.binary
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"bench_vs_torch: no benchmark binary at {binary} (build the target bench_vs_torch)")
    out_dir = prepare_out_dir(args.out_dir or os.path.dirname(os.path.dirname(binary)))
    loom_cases = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True).stdout.split()
    if loom_cases != case_names():
        raise SystemExit(f"bench_vs_torch: the cases of {binary} ({loom_cases}) are not this script's ({case_names()})")
    ncpu = os.cpu_count() or 1
    threads = sorted({int(t) for t in args.threads.split(",")}) if args.threads else sorted({1, 2, ncpu})
    names = [n for n in case_names() if not args.cases or re.search(args.cases, n)]
    if not names:
        raise SystemExit(f"bench_vs_torch: no case matches {args.cases!r}")
    settings = {n: parse_settings(args.torch_threading) if args.torch_threading else default_threading(n)
                for n in threads}

    env, blas = blas_environment(args.blas_env)
    print(f"bench_vs_torch: {blas}", file=sys.stderr, flush=True)
    # in the environment the runs have (OpenBLAS's core depends on it)
    tiling = subprocess.run([binary, "--tiling"], capture_output=True, text=True, check=True, env=env).stdout.strip()
    start = time.time()
    load_start = loadavg()
    results = []
    idle = Idle(0 if args.quick else args.max_wait, args.wait_budget)
    rounds = 1 if args.quick else args.rounds
    ort_dir = args.ort_dir or os.environ.get("ORT_DIR")
    ort_why_not = "not run (--no-ort)" if args.no_ort else ort_missing(ort_dir)
    ort = (f"onnxruntime-node {ORT_VERSION}" if not ort_why_not else f"not run: {ort_why_not}")
    print(f"bench_vs_torch: ONNX Runtime {ort}", file=sys.stderr, flush=True)
    with_ort = set() if ort_why_not else set(ort_cases(names))
    runs = [(rnd, name, n, fw, setting) for rnd in range(1, rounds + 1) for name in names for n in threads
            for fw, setting in [("loom", None)] + [("torch", t) for t in settings[n][:1 if args.quick else None]
                                                   if name not in LOOM_ONLY]
            + ([("ort", None)] if name in with_ort else [])]
    for k, (rnd, name, n, fw, setting) in enumerate(runs, 1):
        busy = idle.wait()
        if fw == "loom":
            cmd = [binary, "--case", name, "--threads", str(n), "--json"]
        elif fw == "ort":
            cmd = [sys.executable, os.path.abspath(__file__), "--ort-case", name, "--threads", str(n),
                   "--ort-dir", ort_dir]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--torch-case", name, "--threads", str(n),
                   "--torch-threading", setting]
        if args.quick:
            cmd.append("--quick")
        r = run_measured(cmd, env)
        r["busy_before_pct"] = busy
        r["round"] = rnd
        results.append(r)
        flop = case_flop(name)
        if fw == "loom" and flop is not None and abs(r["flop"] - flop) > 1e-6 * flop:
            raise SystemExit(f"bench_vs_torch: {name}: loom counts {r['flop']} FLOPs, this script {flop}")
        print(f"[{k:2d}/{len(runs)}] {fw:5s} {name:28s} threads={n} {setting or '':10s} median "
              f"{fmt_time(r['median_s']):>10s}  cpu/wall {r.get('cpu_per_wall', float('nan')):.2f}  "
              f"others busy {r['others_busy_pct']:.0f}%", file=sys.stderr, flush=True)
    torch_version = next((r["torch_version"] for r in results if r["framework"] == "torch"), "?")
    others = [r["others_busy_pct"] for r in results]
    meta = {"quick": args.quick, "rounds": rounds, "commit": git_commit(root), "torch_version": torch_version, "cpu": cpu_model() + "; loom's float GEMM tile: " + tiling,
            "ncpu": ncpu, "threading": settings, "load_start": load_start, "load_end": loadavg(),
            "others_mean": statistics.mean(others), "others_max": max(others),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"), "duration_s": time.time() - start,
            "blas": blas, "ort": ort}
    table = report(results, meta)
    print(table)
    with open(os.path.join(out_dir, "bench_vs_torch.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out_dir, "bench_vs_torch.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(f"written: {os.path.join(out_dir, 'bench_vs_torch.md')} (raw: bench_vs_torch.json)", file=sys.stderr)


def sweep(args):
    """Every threading setting × thread count on a few cases, each in a fresh process."""
    ncpu = os.cpu_count() or 1
    threads = sorted({int(t) for t in args.threads.split(",")}) if args.threads else sorted({1, 2, ncpu})
    names = [n for n in ["mha_fwd_b8_t32_d64_h4", "mha_fwdbwd_b8_t128_d128_h4", "mha_fwdbwd_b1_t1024_d512_h8",
                         "tiny_train", "small_train", "small_train_recompute", "decode", "sgemm"] if not args.cases or re.search(args.cases, n)]
    settings = parse_settings(args.torch_threading) if args.torch_threading else list(THREADING)
    rows = []
    env, blas = blas_environment(args.blas_env)
    idle = Idle(0 if args.quick else args.max_wait, args.wait_budget)
    for n in threads:
        for setting in settings:
            for name in names:
                busy = idle.wait()
                cmd = [sys.executable, os.path.abspath(__file__), "--torch-case", name, "--threads", str(n),
                       "--torch-threading", setting] + (["--quick"] if args.quick else [])
                r = run_measured(cmd, env)
                rows.append((n, setting, name, r, busy))
                print(f"{n} {setting:14s} {name:28s} {fmt_time(r['median_s']):>10s} cpu/wall "
                      f"{r.get('cpu_per_wall', float('nan')):.2f} blas {r['blas_threads']} "
                      f"others {r['others_busy_pct']:.0f}%", file=sys.stderr, flush=True)
    print(f"\nPyTorch threading settings (median; cpu/wall in brackets; load average now {loadavg()}; {blas})\n")
    print("| threads | setting | " + " | ".join(names) + " |")
    print("|---:|---|" + "---:|" * len(names))
    for n in threads:
        for setting in settings:
            cells = []
            for name in names:
                r = next(x[3] for x in rows if x[0] == n and x[1] == setting and x[2] == name)
                cells.append(f"{fmt_time(r['median_s'])} ({r.get('cpu_per_wall', float('nan')):.2f})"
                             + ("*" if r["others_busy_pct"] >= 10 else ""))
            print(f"| {n} | {setting} | " + " | ".join(cells) + " |")
    print("\n(* other processes used ≥ 10% of the CPUs during that run)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=None, help="bench_vs_torch built from bench/ (loom's side)")
    ap.add_argument("--quick", action="store_true", help="smoke run: short warm-up, 3 short repetitions, no idle wait")
    ap.add_argument("--threads", help="comma-separated thread counts (default: 1, 2 and nproc)")
    ap.add_argument("--cases", help="only the cases whose name matches this regular expression")
    ap.add_argument("--torch-threading", help="PyTorch threading setting for every N (--torch-sweep: a "
                    "comma-separated list); one of " + ", ".join(THREADING))
    ap.add_argument("--max-wait", type=float, default=20.0,
                    help="seconds to wait at most, before each run, for the CPUs to be idle (default 20)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="run everything this many times, one round after the other, and keep each "
                         "framework's fastest process (default 2; --quick: 1)")
    ap.add_argument("--wait-budget", type=float, default=180.0,
                    help="seconds to wait for idle CPUs in all, over the whole run (default 180)")
    ap.add_argument("--out-dir", help="where to write bench_vs_torch.md/.json (default: the build directory)")
    ap.add_argument("--blas-env", choices=["auto", "inherit", "unset"], default="auto",
                    help="OpenBLAS's setting for both frameworks: the fastest correct torch.mm among the "
                         "environment's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, OpenBLAS's own detection and the "
                         "core the CPU fits (auto, the default), the environment's (inherit) or its own (unset)")
    ap.add_argument("--ort-dir", help="folder whose node_modules holds onnxruntime-node (default: $ORT_DIR; "
                    "scripts/bench_vs_torch installs it into BUILD_DIR/ort)")
    ap.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    ap.add_argument("--ort-case", help=argparse.SUPPRESS)
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    ap.add_argument("--torch-sweep", action="store_true", help="compare PyTorch's threading settings")
    args = ap.parse_args()
    if args.ort_case:
        run_ort_case(args.ort_case, int(args.threads or 1), args.quick, args.ort_dir)
    elif args.torch_case:
        n = int(args.threads or 1)
        run_torch_case(args.torch_case, n, args.quick, parse_settings(args.torch_threading or default_threading(n)[0])[0])
    elif args.torch_sweep:
        sweep(args)
    else:
        if not args.binary:
            ap.error("--binary is required (scripts/bench_vs_torch builds it and passes it)")
        drive(args)


if __name__ == "__main__":
    main()
