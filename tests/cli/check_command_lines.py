#!/usr/bin/env python3
"""Bad command lines of the examples end with exit status 2 and one line on stderr, naming the
option; never an uncaught exception, a crash, or a silently wrapped value. Also: a resumed
translate run, and bench_vs_torch's --out-dir made before its long run.

    check_command_lines.py --bin DIR --scripts DIR --work DIR
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

failures = []


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def expect_refused(cmd, mention):
    """Exit status 2, exactly one line on stderr, and it mentions `mention`."""
    r = run(cmd)
    lines = r.stderr.splitlines()
    ok = r.returncode == 2 and len(lines) == 1 and mention in lines[0]
    print(("ok    " if ok else "FAIL  ") + " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd)))
    if not ok:
        failures.append(f"{cmd}: exit {r.returncode}, stderr {r.stderr!r} (wanted 2 and one line with {mention!r})")


def check_bench_decode_ab(scripts, work):
    """scripts/bench_decode_ab: bad arguments end with exit status 2 before anything is built, and
    the older bench_decode.cpp forms get the 1-s warm-up (the lines below are those of f228fb9
    and of the later commits that warmed up for a quarter second); a form it does not know is refused."""
    script = os.path.join(scripts, "bench_decode_ab")
    for bad, mention in ((["--rounds", "0"], "--rounds"), (["--threads", "a"], "--threads"),
                         (["--threads", "1,0"], "thread count")):
        r = run([sys.executable, script] + bad)
        ok = r.returncode == 2 and mention in r.stderr and "Traceback" not in r.stderr
        print(("ok    " if ok else "FAIL  ") + "bench_decode_ab " + " ".join(bad))
        if not ok:
            failures.append(f"bench_decode_ab {bad}: exit {r.returncode}, stderr {r.stderr!r}")
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("bench_decode_ab", script)
    spec = importlib.util.spec_from_loader("bench_decode_ab", loader)
    ab = importlib.util.module_from_spec(spec)
    loader.exec_module(ab)
    one_second = "    for (auto t0 = clock_type::now(); seconds_since(t0) < 1.0;) cached_steps(run_step, cache, prompt, 8, nullptr);\n"
    forms = {"one call": "    cached_steps(run_step, cache, prompt, 8, nullptr);  // warm-up\n",
             "quarter second": "    for (auto t0 = clock_type::now(); seconds_since(t0) < 0.25;) "
                               "cached_steps(run_step, cache, prompt, 8, nullptr);\n",
             "one second": one_second}
    d = os.path.join(work, "bench_decode_ab")
    os.makedirs(d, exist_ok=True)
    for name, line in forms.items():
        path = os.path.join(d, "bench_decode.cpp")
        with open(path, "w") as f:
            f.write("int before;\n" + line + "int after;\n")
        try:
            ab.same_warmup(path)
        except SystemExit as e:
            failures.append(f"bench_decode_ab.same_warmup refused the {name} form: {e}")
            continue
        with open(path) as f:
            got = f.read()
        if got != "int before;\n" + one_second + "int after;\n":
            failures.append(f"bench_decode_ab.same_warmup, {name} form: {got!r}")
    with open(path, "w") as f:
        f.write("    for (int w = 0; w < 3; ++w) cached_steps(run_step, cache, prompt, 8, nullptr);\n")
    try:
        ab.same_warmup(path)
        failures.append("bench_decode_ab.same_warmup accepted a warm-up it does not know")
    except SystemExit as e:
        if "does not know" not in str(e):
            failures.append(f"bench_decode_ab.same_warmup: {e}")


def safetensors(path, tensors):
    """A valid safetensors file of F32 tensors {name: (shape, values)}."""
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scripts", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    translate = os.path.join(args.bin, "translate")
    generate = os.path.join(args.bin, "generate")
    attention = os.path.join(args.bin, "attention_example")
    charlm = os.path.join(args.bin, "charlm")
    custom_op = os.path.join(args.bin, "custom_op")
    llama = os.path.join(args.bin, "llama")
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "out")

    corrupt = os.path.join(work, "corrupt.safetensors")
    with open(corrupt, "wb") as f:
        f.write(struct.pack("<Q", 40) + b'{"w": {"dtype": "F32", "shape": [[[[[[[[')
    foreign = os.path.join(work, "foreign.safetensors")
    safetensors(foreign, {"some.other.weight": ([2], [1.0, 2.0])})
    a_file = os.path.join(work, "a_file")
    open(a_file, "w").close()

    t = [translate, "--out", out]
    for bad, mention in [
        (["--steps", "abc"], "--steps"), (["--steps", "3x"], "--steps"), (["--steps", "0"], "--steps"),
        (["--steps", "-5"], "--steps"), (["--steps", "1e3"], "--steps"), (["--steps"], "--steps"),
        (["--batch", "0"], "--batch"), (["--batch", "-1"], "--batch"), (["--batch", "100000"], "--batch"),
        (["--seed", "-1"], "--seed"), (["--seed", "abc"], "--seed"), (["--seed", "99999999999999999999"], "--seed"),
        (["--threads", "100000"], "--threads"), (["--threads", "-1"], "--threads"),
        (["--minutes", "nan"], "--minutes"), (["--minutes", "inf"], "--minutes"), (["--minutes", "-1"], "--minutes"),
        (["--max", "0"], "--max"), (["--max", "1000000000"], "--max"),
        (["--checkpoint-every", "-1"], "--checkpoint-every"), (["--bogus", "1"], "--bogus"),
    ]:
        expect_refused(t + bad, mention)
    expect_refused([translate, "--out", "/proc/no-such-dir"], "--out")
    expect_refused([translate, "--out", a_file], "--out")
    for name, source in [("corrupt", corrupt), ("foreign", foreign)]:
        d = os.path.join(work, name)
        os.makedirs(d)
        shutil.copy(source, os.path.join(d, "checkpoint.safetensors"))
        expect_refused([translate, "--out", d, "--resume", "--steps", "2"], "--resume")

    g = [generate, "--checkpoint", foreign]
    for bad, mention in [
        (["--temperature", "nan"], "--temperature"), (["--temperature", "-1"], "--temperature"),
        (["--temperature", "abc"], "--temperature"), (["--top-k", "-1"], "--top-k"), (["--top-k", "1000"], "--top-k"),
        (["--seed", "-1"], "--seed"), (["--threads", "100000"], "--threads"), (["--train-steps", "0"], "--train-steps"),
        (["12a"], "12a"), (["1234567890"], "1234567890"), (["-5"], "-5"),
    ]:
        expect_refused(g + bad, mention)
    expect_refused([generate, "--checkpoint", os.path.join(work, "absent.safetensors")], "--checkpoint")
    expect_refused([generate, "--checkpoint", corrupt], "--checkpoint")
    expect_refused([generate, "--checkpoint", foreign], "--checkpoint")
    c = [charlm, "--out", out]
    for bad, mention in [
        (["--steps", "3x"], "--steps"), (["--steps", "0"], "--steps"), (["--seed", "-1"], "--seed"),
        (["--threads", "100000"], "--threads"), (["--minutes", "nan"], "--minutes"),
        (["--temperature", "nan"], "--temperature"), (["--temperature", "-0.5"], "--temperature"),
        (["--top-k", "-1"], "--top-k"), (["--top-k", "abc"], "--top-k"), (["--bogus"], "--bogus"),
    ]:
        expect_refused(c + bad, mention)
    expect_refused([charlm, "--out", a_file], "--out")
    m = [llama, "--out", out]
    for bad, mention in [
        (["--steps", "0"], "--steps"), (["--seed", "-1"], "--seed"), (["--threads", "100000"], "--threads"),
        (["--minutes", "inf"], "--minutes"), (["--temperature", "-1"], "--temperature"), (["--top-k", "1001"], "--top-k"),
        (["--bogus"], "--bogus"),
    ]:
        expect_refused(m + bad, mention)
    expect_refused([llama, "--out", a_file], "--out")
    expect_refused([attention, "--dot", "/proc/no-such-dir/graph.dot"], "--dot")
    expect_refused([attention, "--bogus"], "--bogus")
    for bad, mention in [
        (["--steps", "0"], "--steps"), (["--steps", "3x"], "--steps"), (["--steps", "-1"], "--steps"),
        (["--dot", "/proc/no-such-dir/graph.dot"], "--dot"), (["--bogus"], "--bogus"),
    ]:
        expect_refused([custom_op] + bad, mention)

    # --help is no error
    for exe in (translate, generate, attention, charlm, custom_op, llama):
        r = run([exe, "--help"])
        if r.returncode != 0 or "--" not in r.stdout:
            failures.append(f"{exe} --help: exit {r.returncode}")

    # translate saves a checkpoint every N steps, and --resume continues from it (with the
    # same settings only)
    d = os.path.join(work, "resume")
    r = run([translate, "--out", d, "--steps", "4", "--checkpoint-every", "2", "--threads", "2"])
    if r.returncode != 0:
        failures.append(f"translate --steps 4: exit {r.returncode}: {r.stderr[-500:]}")
    r = run([translate, "--out", d, "--steps", "4", "--resume", "--threads", "2"])
    if r.returncode != 0 or "resumed from" not in r.stdout or "at step 4" not in r.stdout:
        failures.append(f"translate --resume: exit {r.returncode}, stdout {r.stdout[:400]!r}")
    with open(os.path.join(d, "loss.csv")) as f:
        steps = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    if [s for s in steps] != ["1", "2", "3", "4", "4"]:  # four steps and the validation at the last
        failures.append(f"loss.csv after a resume holds steps {steps}")
    expect_refused([translate, "--out", d, "--steps", "4", "--resume", "--seed", "2"], "trained with seed 1")
    leftovers = [n for n in os.listdir(d) if n.endswith(".tmp")]
    if leftovers:
        failures.append(f"temporary files left in {d}: {leftovers}")

    # bench_vs_torch makes its --out-dir before the run, not after it
    sys.path.insert(0, args.scripts)
    import bench_vs_torch
    made = bench_vs_torch.prepare_out_dir(os.path.join(work, "bench", "nested"))
    if not os.path.isdir(made):
        failures.append("bench_vs_torch.prepare_out_dir did not create the folder")
    try:
        bench_vs_torch.prepare_out_dir("/proc/no-such-dir")
        failures.append("bench_vs_torch.prepare_out_dir accepted an unwritable folder")
    except SystemExit as e:
        if "cannot write to --out-dir" not in str(e):
            failures.append(f"bench_vs_torch.prepare_out_dir: {e}")

    check_bench_decode_ab(args.scripts, work)

    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
