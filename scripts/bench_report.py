#!/usr/bin/python3
"""The markdown report of scripts/bench_vs_torch.py: the side-by-side table, memory and GFLOP/s."""

import re

from bench_torch_cases import GQA, THREADING, case_names, describe_threading, seq2seq_flop


def fmt_time(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms" if s < 0.1 else f"{s * 1e3:.0f} ms"
    return f"{s * 1e6:.3g} µs"


LABELS = {"tiny_train": "train step, tiny enc–dec (d=64, h=4, 2+2, ffn 256, V=32, B=32, S=T=16)",
          "small_train": "train step, small enc–dec (d=256, h=8, 3+3, ffn 1024, V=1000, B=16, S=T=64)",
          "small_train_recompute": "the same, each layer recomputed in backward (loom: transformer_config::recompute; PyTorch: torch.utils.checkpoint per layer)",
          "gqa_fwd": "GQA attention forward, causal (B=4, Hq=16, Hkv=4, T=S=512, d=64)",
          "gqa_fwdbwd": "GQA attention forward+backward, causal (B=4, Hq=16, Hkv=4, T=S=512, d=64)",
          "decode": "greedy decode, KV cache, per token (2 layers, d=256, h=8, ffn 1024, V=1000, prompt 16, 128 new)",
          "decode_b8": "the same for 8 sequences at once, per step (8 tokens)",
          "decode_b8_packed": "decode_b8 with each weight packed for the GEMM once (exec_options::pack_weights; loom only)",
          "decode_t512": "greedy decode as above with 512 new tokens (cache up to 528 positions), per token",
          "decode_int8": "decode with the weights in int8 (exec_options::weights; loom only), 128 new, per token",
          "decode_int8_t512": "decode_t512 with the weights in int8 (loom only), per token",
          "decode_gemv_int8": "decode_gemv with the weights in int8 (loom only)",
          "sgemm": "sgemm 1024³, time per product at full throughput (loom: N concurrent single-thread "
                   "calls through its BLAS; PyTorch: torch.mm on N threads)",
          "fma_peak": "FP32 FMA peak: N threads of independent vector FMAs on registers (time per call)",
          "read_bw_memory": "read bandwidth from memory: N threads summing shares of one 512 MiB buffer",
          "read_bw_decode": "read bandwidth over the decode case's weight bytes (N threads, shares of one buffer)",
          "decode_gemv": "the decode case's nine weight GEMVs alone (one row each, as a decoding step runs them)",
          "tiny_train_bf16": "tiny_train in bf16 (loom: exec_options::precision; PyTorch: CPU autocast to bfloat16)",
          "small_train_bf16": "small_train in bf16 (loom: exec_options::precision; PyTorch: CPU autocast to "
                              "bfloat16)"}


def seconds(r):
    """The median time of a result; for sgemm, per 1024³ product (loom runs N of them at once)."""
    return r["median_s"] * (2 * 1024 ** 3 / r["flop"] if r["case"] == "sgemm" else 1)


def gflops(r):
    return r["flop"] / r["median_s"] * 1e-9


def pct_of(r, peak):
    """r's GFLOP/s as a percentage of the fma_peak result `peak` (same thread count)."""
    return f"{100 * gflops(r) / gflops(peak):.0f}%"


def label(name):
    m = re.match(r"mha_(fwd|fwdbwd)_b(\d+)_t(\d+)_d(\d+)_h(\d+)(_bf16)?$", name)
    if m:
        what = "MHA forward" if m.group(1) == "fwd" else "MHA forward+backward"
        return (f"{what} (B={m.group(2)}, T={m.group(3)}, d={m.group(4)}, h={m.group(5)})"
                + (" in bf16 (loom: exec_options::precision; PyTorch: CPU autocast to bfloat16)" if m.group(6) else ""))
    return LABELS.get(name, name)


def report(results, meta):
    by, tried = {}, {}  # PyTorch: the fastest of the settings tried for a case and thread count
    for r in results:
        key = (r["framework"], r["case"], r["threads"])
        tried.setdefault(key, []).append(r)
        if key not in by or seconds(r) < seconds(by[key]):
            by[key] = r
    threads = sorted({r["threads"] for r in results})
    names = [n for n in case_names() if any(r["case"] == n for r in results)]
    out = []
    w = out.append
    w(f"## loom vs PyTorch{' (--quick: smoke run, few repetitions)' if meta['quick'] else ''}\n")
    w(f"- ratio = **PyTorch time / loom time: > 1 means loom is faster**; time = median of "
      f"{'3' if meta['quick'] else '7'} timed repetitions after warm-up, float32 with subnormals flushed to "
      f"zero in every framework (loom's float default, exec_options::subnormals; torch.set_flush_denormal(True); "
      f"ONNX Runtime's session.set_denormal_as_zero), each framework and case in its own process" + (f"; {meta['rounds']} rounds, one after the other, and each framework's faster "
                                "round counts (a note shows rounds more than 15% apart)" if meta["rounds"] > 1 else ""))
    w(f"- loom {meta['commit']}; PyTorch {meta['torch_version']}; {meta['cpu']}, {meta['ncpu']} CPUs; "
      f"{meta['blas']}")
    w("- PyTorch threading (see `THREADING` in scripts/bench_torch_cases.py; where two are listed, both ran and "
      "the faster counts, named in the notes): " + "; ".join(
        f"{n} thread{'s' if n > 1 else ''}: " + " or ".join(f"`{t}` ({describe_threading(t, n)})"
                                                             for t in meta["threading"][n]) for n in threads))
    w(f"- machine load: load average {meta['load_start']} at start, {meta['load_end']} at end; other processes "
      f"used {meta['others_mean']:.0f}% of the CPUs on average during the runs (worst run {meta['others_max']:.0f}%)"
      f"; {meta['date']}, {meta['duration_s'] / 60:.1f} min\n")
    w("| case | threads | loom | PyTorch | ratio | notes |")
    w("|---|---:|---:|---:|---:|---|")
    for name in names:
        for n in threads:
            lo, to = by.get(("loom", name, n)), by.get(("torch", name, n))
            if not lo and not to:
                continue
            notes = []
            peak = by.get(("loom", "fma_peak", n))
            if name == "fma_peak":
                if lo:
                    notes.append(f"{gflops(lo):.0f} GFLOP/s ({n} thread{'s' if n > 1 else ''} × "
                                 f"{lo['vector_floats']:.0f}-float FMAs); the other rows' % of peak are of this")
            elif name == "sgemm":
                if lo:
                    notes.append(f"loom {lo['flop'] / lo['median_s'] * 1e-9:.0f} GFLOP/s"
                                 + (f" ({pct_of(lo, peak)} of FMA peak)" if peak else ""))
                if to:
                    notes.append(f"torch.mm {to['flop'] / to['median_s'] * 1e-9:.0f} GFLOP/s")
            elif name.startswith("read_bw") or name in ("decode_gemv", "decode_gemv_int8"):
                if lo:
                    notes.append(f"{lo['bytes'] / lo['median_s'] * 1e-9:.1f} GB/s")
                base = by.get(("loom", "decode_gemv", n))
                if lo and base and name == "decode_gemv_int8":
                    notes.insert(0, f"**{seconds(base) / seconds(lo):.2f}× decode_gemv (float32)**")
                bw = by.get(("loom", "read_bw_decode", n))
                if lo and bw and name == "decode_gemv":
                    notes.append(f"{100 * (lo['bytes'] / lo['median_s']) / (bw['bytes'] / bw['median_s']):.0f}% of "
                                 "read_bw_decode")
            elif name in ("decode", "decode_b8", "decode_b8_packed", "decode_t512", "decode_int8", "decode_int8_t512"):
                base = by.get(("loom", "decode" if name == "decode_int8" else "decode_t512", n))
                if lo and base and name.startswith("decode_int8"):
                    notes.append(f"**{seconds(base) / seconds(lo):.2f}× loom float32** ({fmt_time(seconds(base))})")
                unpacked = by.get(("loom", "decode_b8", n))
                if lo and unpacked and name == "decode_b8_packed":
                    notes.append(f"**{seconds(unpacked) / seconds(lo):.2f}× decode_b8** ({fmt_time(seconds(unpacked))})")
                bw = by.get(("loom", "read_bw_decode", n))
                if lo and "weight_bytes" in lo and not lo.get("int8"):  # int8 reads a quarter of them
                    notes.append(f"loom: its {lo['weight_bytes'] / 2 ** 20:.1f} MiB of parameters per step time "
                                 f"{lo['weight_bytes'] / lo['median_s'] * 1e-9:.1f} GB/s"
                                 + (f" ({100 * lo['weight_bytes'] / lo['median_s'] / (bw['bytes'] / bw['median_s']):.0f}%"
                                    " of read_bw_decode)" if bw else ""))
                for r, who in ((lo, "loom"), (to, "PyTorch")):
                    if r:
                        notes.append(f"{who}: prefill {fmt_time(r['prefill_s'])}, {r.get('tokens', 128):.0f} tokens "
                                     f"{fmt_time(r['total_s'])}"
                                     + ("" if r["tokens_valid"] else " **(no valid tokens!)**"))
            elif lo and "flop" in lo:
                base = by.get(("loom", name.removesuffix("_bf16"), n)) if name.endswith("_bf16") else None
                if base:
                    notes.append(f"**{seconds(base) / seconds(lo):.2f}× loom float32** ({fmt_time(seconds(base))})")
                notes.append(f"GFLOP/s {lo['flop'] / lo['median_s'] * 1e-9:.1f} vs "
                             f"{to['flop'] / to['median_s'] * 1e-9:.1f}" if to else "")
                if peak:
                    notes.append(("% of the FP32 FMA peak (bf16's is twice it) " if name.endswith("_bf16")
                                  else "% of FMA peak ") + pct_of(lo, peak) + (f" vs {pct_of(to, peak)}" if to else ""))
            runs_of = {}  # PyTorch setting -> its runs (one per round)
            for r in tried.get(("torch", name, n), []):
                runs_of.setdefault(r["threading"], []).append(r)
            if to and len(runs_of) > 1:
                notes.append(f"PyTorch: `{to['threading']}` (" + ", ".join(
                    f"`{t}` {fmt_time(min(seconds(r) for r in rs))}" for t, rs in runs_of.items()
                    if t != to["threading"]) + ")")
            for who, rs in (("loom", tried.get(("loom", name, n), [])), ("PyTorch", runs_of.get(to and to["threading"], []))):
                times = [seconds(r) for r in rs]
                if len(times) > 1 and max(times) > 1.15 * min(times):
                    notes.append(f"{who} rounds differ: " + ", ".join(fmt_time(t) for t in times))
            one = by.get(("torch", name, 1))
            if n > 1 and to and one and seconds(one) < seconds(to):
                notes.append(f"PyTorch is faster on 1 thread ({fmt_time(seconds(one))})")
            cpw = [f"{r['cpu_per_wall']:.2f}" for r in (lo, to) if r and "cpu_per_wall" in r]
            if len(cpw) == 2:
                notes.append(f"cpu/wall {cpw[0]} vs {cpw[1]}")
            busy = max((r["others_busy_pct"] for r in [lo] + tried.get(("torch", name, n), []) if r), default=0)
            if busy >= 10:
                notes.append(f"**others busy {busy:.0f}%**")
            ratio = f"**{seconds(to) / seconds(lo):.2f}**" if lo and to else "–"
            w(f"| {label(name)} | {n} | {fmt_time(seconds(lo)) if lo else '–'} | "
              f"{fmt_time(seconds(to)) if to else '–'} | {ratio} | {'; '.join(x for x in notes if x)} |")

    orts = [(name, n) for name in names for n in threads if ("ort", name, n) in by]
    if orts or meta.get("ort"):
        w(f"\n**ONNX Runtime** ({meta.get('ort', '')}): the PyTorch models of the rows above exported with "
          "torch.onnx (opset 17), run by onnxruntime-node's CPU execution provider from Node.js (intraOpNumThreads = "
          "threads, interOpNumThreads 1, sequential, all graph optimizations, subnormals as zero), same protocol; each run first "
          "checks ONNX Runtime against PyTorch (MHA output within 1e-4; the greedy tokens identical). "
          "ratio = **ONNX Runtime time / loom time: > 1 means loom is faster**.\n")
        if orts:
            w("| case | threads | loom | ONNX Runtime | ratio | notes |")
            w("|---|---:|---:|---:|---:|---|")
        for name, n in orts:
            lo, oo = by.get(("loom", name, n)), by[("ort", name, n)]
            notes = []
            if name == "decode":
                notes.append(f"ONNX Runtime: prefill {fmt_time(oo['prefill_s'])}, 128 tokens "
                             f"{fmt_time(oo['total_s'])}, tokens equal to PyTorch's")
            elif "max_abs_error_vs_torch" in oo:
                notes.append(f"largest difference from PyTorch {oo['max_abs_error_vs_torch']:.1e}")
            times = [seconds(r) for r in tried.get(("ort", name, n), [])]
            if len(times) > 1 and max(times) > 1.15 * min(times):
                notes.append("ONNX Runtime rounds differ: " + ", ".join(fmt_time(t) for t in times))
            if lo and "cpu_per_wall" in oo:
                notes.append(f"cpu/wall {lo.get('cpu_per_wall', float('nan')):.2f} vs {oo['cpu_per_wall']:.2f}")
            ratio = f"**{seconds(oo) / seconds(lo):.2f}**" if lo else "–"
            w(f"| {label(name)} | {n} | {fmt_time(seconds(lo)) if lo else '–'} | {fmt_time(seconds(oo))} | {ratio} | "
              f"{'; '.join(notes)} |")

    gqas = [n for n in ("gqa_fwd", "gqa_fwdbwd") if n in names]
    if gqas:
        w("\n**Grouped-query attention: memory** (no copy of the key/value heads in loom: its plan has one fused "
          "attention node reading k and v [B, Hkv, S, d] in place; PyTorch's explicit math repeats them to "
          "[B, Hq, S, d] and keeps the [B, Hq, T, S] weights. RSS increase = peak − baseline before the case):\n")
        w("| case | threads | loom arena | loom RSS increase | loom plan | PyTorch RSS increase | "
          "one repeated copy of k and v |")
        w("|---|---:|---:|---:|---|---:|---:|")
        for name in gqas:
            for n in threads:
                lo, to = by.get(("loom", name, n)), by.get(("torch", name, n))
                if not lo or not to:
                    continue
                w(f"| {name} | {n} | {lo['arena_mib']:.1f} MiB | {lo['rss_peak_mib'] - lo['rss_baseline_mib']:.1f} MiB "
                  f"| {lo['plan_nodes']:.0f} nodes, {lo['fused_attention_nodes']:.0f} fused attention | "
                  f"{to['rss_peak_mib'] - to['rss_baseline_mib']:.1f} MiB | {to['kv_expanded_mib']:.1f} MiB |")

    trains = [n for n in ("tiny_train", "small_train", "small_train_recompute") if n in names]
    if trains:
        w("\n**Peak memory of the training step** (RSS, `getrusage` ru_maxrss, one process per "
          "configuration; increase = peak − baseline measured just before building the model; loom's executor "
          "arena = its value and gradient buffers, `executor::arena_bytes()`):\n")
        w("| configuration | threads | loom increase | loom total | loom executor arena | PyTorch increase | "
          "PyTorch total | PyTorch / loom (increase) |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in trains:
            for n in threads:
                lo, to = by.get(("loom", name, n)), by.get(("torch", name, n))
                if not lo or not to:
                    continue
                li, ti = lo["rss_peak_mib"] - lo["rss_baseline_mib"], to["rss_peak_mib"] - to["rss_baseline_mib"]
                w(f"| {name} ({lo['params']:,} parameters) | {n} | {li:.1f} MiB | {lo['rss_peak_mib']:.1f} MiB | "
                  f"{lo['arena_mib']:.1f} MiB | {ti:.1f} MiB | {to['rss_peak_mib']:.1f} MiB | {ti / li:.2f} |")

        w("\n**Achieved GFLOP/s of the training step** (GEMM FLOPs counted analytically: "
          "`seq2seq_flop` in scripts/bench_torch_cases.py, forward × 3; ceiling = 1024³ sgemm through loom's "
          "BLAS entry, N concurrent single-thread calls; FMA peak = the fma_peak row; both measured in "
          "this run):\n")
        w("| configuration | threads | GFLOP per step | loom GFLOP/s | PyTorch GFLOP/s | sgemm ceiling | "
          "loom % of ceiling | PyTorch % of ceiling | FMA peak | loom % of peak | PyTorch % of peak |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        disturbed = []
        for name in trains:
            for n in threads:
                lo, to, sg = by.get(("loom", name, n)), by.get(("torch", name, n)), by.get(("loom", "sgemm", n))
                if not lo or not to:
                    continue
                lg, tg = lo["flop"] / lo["median_s"] * 1e-9, to["flop"] / to["median_s"] * 1e-9
                pk = by.get(("loom", "fma_peak", n))
                cells = []  # each reference (ceiling, peak): its GFLOP/s and both shares, or – when not run
                for ref in (sg, pk):
                    g = gflops(ref) if ref else None
                    cells += [f"{g:.0f}", f"{100 * lg / g:.0f}%", f"{100 * tg / g:.0f}%"] if g else ["–"] * 3
                w(f"| {name} | {n} | {lo['flop'] * 1e-9:.2f} | {lg:.1f} | {tg:.1f} | " + " | ".join(cells) + " |")
                if sg and max(lg, tg) > gflops(sg):
                    disturbed.append(f"{name} at {n} threads")

        if disturbed:
            w("\nAbove the ceiling (" + ", ".join(disturbed) + "): the sgemm run was slowed down by something "
              "the load figures do not show (on a VM, the host); compare with the sgemm rows of the main table.")
        checks = []
        for name in trains:
            for n in threads:
                for fw in ("loom", "torch"):
                    r = by.get((fw, name, n))
                    if r:
                        ok = r["loss_last"] < r["loss_timed_first"]
                        checks.append(f"{fw} {name} t={n}: {r['loss_timed_first']:.3f} → {r['loss_last']:.3f} "
                                      f"over {r['steps'] - r['warmup_calls']} timed steps"
                                      + ("" if ok else " **(did not decrease!)**"))
        w("\nLoss over the timed steps (same batch every step, Adam lr 1e-3; the weights differ between "
          "the frameworks, so the values do not match): " + "; ".join(checks) + ".")
    return "\n".join(out) + "\n"
