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

# ---------------------------------------------------------------- PyTorch threading settings
#
# How PyTorch is told to use N threads. A setting is applied in a fresh process before torch is
# imported (libgomp and OpenBLAS read the environment when they load):
#
#   plain           torch.set_num_threads(N) only: what most users write
#   interop1        + torch.set_num_interop_threads(1), before any work
#   env             OMP_NUM_THREADS = MKL_NUM_THREADS = OPENBLAS_NUM_THREADS = N, interop 1
#   blas1           env with OPENBLAS_NUM_THREADS=1: ATen's loops on N threads, each BLAS call
#                   on its calling thread (loom's model)
#   passive         env + OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning
#   passive_blas1   blas1 + OMP_WAIT_POLICY=PASSIVE
#   spin10k/100k    env + GOMP_SPINCOUNT=10⁴ / 10⁵ (libgomp spins 3·10⁵ times by default)
#   omp1_blasN      torch.set_num_threads(1), OMP_NUM_THREADS=1, OpenBLAS on N threads
#
# What --torch-sweep measured on the development machine (2-core AMD EPYC VM, idle, median of 7;
# Debian's PyTorch 1.13 on OpenMP with the system's OpenBLAS pthread build):
#   N = 1  plain and interop1 are not one-thread runs: OpenBLAS starts a thread per core whatever
#          torch.set_num_threads says (cpu/wall 1.99; sgemm 10.3 ms, i.e. two cores). With
#          OPENBLAS_NUM_THREADS=1 (env; blas1 is the same setting at N = 1) every case uses one core.
#   N = 2  plain is pathological: tiny_train 78 ms against 21–23 ms on one thread, small_train
#          755 ms against 456 ms, because libgomp's threads spin-wait on the cores OpenBLAS's
#          threads need. set_num_interop_threads(1) does not help (80 / 745 ms), nor OMP and BLAS
#          env vars (env: 24 / 713 ms) or GOMP_SPINCOUNT=10⁵ (65 / 560 ms); 10⁴ helps on
#          small_train only (37 / 335 ms). OMP_WAIT_POLICY=PASSIVE removes it (21–29 / 329–339 ms);
#          blas1 too, but it leaves every GEMM on one core (sgemm 20 ms, small_train 464–475 ms);
#          omp1_blasN is close to passive and the faster on some small cases (mha_fwd_b8_t32:
#          201 against 313–382 µs). Between two processes with the same setting, medians moved
#          by up to ~25% (e.g. tiny_train 20.7 and 28.5 ms with passive).
# So: at N = 1 "env"; at N ≥ 2 each case runs with both passive and omp1_blasN and the faster
# counts (the table names it): the best PyTorch configuration we found, per case.


def _setting(omp="{n}", blas="{n}", interop1=True, set_threads="{n}", **extra):
    env = {} if omp is None else {"OMP_NUM_THREADS": omp, "MKL_NUM_THREADS": omp}
    if blas is not None:
        env["OPENBLAS_NUM_THREADS"] = blas
    env.update(extra)
    return {"env": env, "interop1": interop1, "set_threads": set_threads}


THREADING = {
    "plain": _setting(omp=None, blas=None, interop1=False),
    "interop1": _setting(omp=None, blas=None),
    "env": _setting(),
    "blas1": _setting(blas="1"),
    "passive": _setting(OMP_WAIT_POLICY="PASSIVE"),
    "passive_blas1": _setting(blas="1", OMP_WAIT_POLICY="PASSIVE"),
    "spin10k": _setting(GOMP_SPINCOUNT="10000"),
    "spin100k": _setting(GOMP_SPINCOUNT="100000"),
    "omp1_blasN": _setting(omp="1", set_threads="1"),
}


def default_threading(n):
    """The PyTorch settings tried at n threads (the faster counts)."""
    return ["env"] if n == 1 else ["passive", "omp1_blasN"]


def threading_env(name, n):
    return {k: v.format(n=n) for k, v in THREADING[name]["env"].items()}


def describe_threading(name, n):
    t = THREADING[name]
    parts = [f"{k}={v}" for k, v in threading_env(name, n).items()]
    parts.append(f"torch.set_num_threads({t['set_threads'].format(n=n)})")
    if t["interop1"]:
        parts.append("torch.set_num_interop_threads(1)")
    return ", ".join(parts)


# ---------------------------------------------------------------- the cases (as in bench_vs_torch.cpp)

MHA_SHAPES = [(8, 32, 64, 4), (8, 128, 128, 4), (4, 512, 256, 8), (1, 1024, 512, 8)]
TINY = dict(d=64, h=4, ffn=256, enc=2, dec=2, src_vocab=32, tgt_vocab=32, batch=32, len=16)
SMALL = dict(d=256, h=8, ffn=1024, enc=3, dec=3, src_vocab=1000, tgt_vocab=1000, batch=16, len=64)
LM = dict(d=256, h=8, ffn=1024, layers=2, vocab=1000, prompt=16, new_tokens=128)
GQA = dict(b=4, hq=16, hkv=4, t=512, d=64)


def mha_name(kind, b, t, d, h):
    return f"mha_{kind}_b{b}_t{t}_d{d}_h{h}"


def case_names():
    names = []
    for b, t, d, h in MHA_SHAPES:
        names += [mha_name("fwd", b, t, d, h), mha_name("fwdbwd", b, t, d, h)]
    return names + ["tiny_train", "small_train", "small_train_recompute", "gqa_fwd", "gqa_fwdbwd", "decode", "sgemm",
                    "fma_peak"]


# Cases PyTorch has no side of: the machine's FMA peak, which every GFLOP/s figure is read against.
LOOM_ONLY = {"fma_peak"}


def mha_flop(b, t, d):
    """GEMM FLOPs of multi-head self-attention forward (a multiply-add = 2 FLOPs): QKV projection
    2·B·T·d·3d, scores 2·B·T·T·d, weights·V 2·B·T·T·d, out projection 2·B·T·d·d. Forward +
    backward counts 3× this (the backward does two GEMMs per forward GEMM)."""
    return 2 * b * t * d * 3 * d + 4 * b * t * t * d + 2 * b * t * d * d


def seq2seq_flop(c):
    """GEMM FLOPs of one encoder–decoder forward, B = batch, S = T = len, d, f = ffn, V = tgt_vocab
    (biases, norms, softmax, embeddings left out):
      encoder layer: 2·B·S·d·(3d + d + 2f) + 4·B·S²·d         QKV, out, FFN; scores, weights·V
      decoder layer: 2·B·T·d·(3d + d + 2f) + 4·B·T²·d          self-attention, FFN
                   + 2·B·T·d·2d + 2·B·S·d·2d + 4·B·T·S·d       cross: Q and out, K and V; scores, weights·V
      generator:     2·B·T·d·V
    A training step counts 3× this (two backward GEMMs per forward GEMM); Adam is not counted."""
    B, S, T, d, f = c["batch"], c["len"], c["len"], c["d"], c["ffn"]
    enc = 2 * B * S * d * (4 * d + 2 * f) + 4 * B * S * S * d
    dec = 2 * B * T * d * (4 * d + 2 * f) + 4 * B * T * T * d + 2 * B * T * d * 2 * d + 2 * B * S * d * 2 * d \
        + 4 * B * T * S * d
    return c["enc"] * enc + c["dec"] * dec + 2 * B * T * d * c["tgt_vocab"]


def case_flop(name):
    m = re.match(r"mha_(fwd|fwdbwd)_b(\d+)_t(\d+)_d(\d+)_h(\d+)$", name)
    if m:
        b, t, d = int(m.group(2)), int(m.group(3)), int(m.group(4))
        return mha_flop(b, t, d) * (1 if m.group(1) == "fwd" else 3)
    if name == "tiny_train":
        return 3 * seq2seq_flop(TINY)
    if name in ("small_train", "small_train_recompute"):
        return 3 * seq2seq_flop(SMALL)  # the recomputed forward is not counted
    if name in ("gqa_fwd", "gqa_fwdbwd"):
        return (1 if name == "gqa_fwd" else 3) * gqa_flop()
    return None


def gqa_flop():
    """GEMM FLOPs of causal attention alone, as loom counts them: scores and weights·V,
    2·2·B·Hq·T·S·d, halved by the causal mask."""
    return 0.5 * 4 * GQA["b"] * GQA["hq"] * GQA["t"] * GQA["t"] * GQA["d"]


class Lcg:
    """The token generator shared with bench_vs_torch.cpp: a 64-bit LCG, ids in [3, vocab)."""

    def __init__(self, seed):
        self.state = seed

    def next_id(self, vocab):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return 3 + (self.state >> 33) % (vocab - 3)


# ---------------------------------------------------------------- PyTorch side (one case per process)

class Protocol:
    """bench_vs_torch.cpp's timing protocol (see its header)."""

    def __init__(self, quick):
        self.quick = quick
        self.warmup_calls = 1 if quick else 3
        self.warmup_seconds = 0.05 if quick else 0.3
        self.repetitions = 3 if quick else 7
        self.repetition_seconds = 0.03 if quick else 0.2


def time_calls(p, call):
    warm = []  # seconds of each warm-up call
    w0 = time.perf_counter()
    while len(warm) < p.warmup_calls or time.perf_counter() - w0 < p.warmup_seconds:
        c0 = time.perf_counter()
        call()
        warm.append(time.perf_counter() - c0)
    per_call = statistics.median(warm[1:] or warm)  # the first call allocates and faults pages in
    iters = max(1, round(p.repetition_seconds / per_call))
    reps = []
    cpu0, t_all = time.process_time(), time.perf_counter()
    for _ in range(p.repetitions):
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        reps.append((time.perf_counter() - t0) / iters)
    cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - t_all)
    return {"median_s": statistics.median(reps), "min_s": min(reps), "iters": iters, "warmup_calls": len(warm),
            "reps_s": reps, "cpu_per_wall": cpu_per_wall}


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def sinusoid_table(torch, length, d):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), in double (as loom)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    j = torch.arange(d)
    angle = pos / torch.pow(10000.0, (j - j % 2).double() / d)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).float()


def torch_mha(torch, p, fwd_only, b, t, d, h):
    torch.manual_seed(42)
    m = torch.nn.MultiheadAttention(d, h, batch_first=True)  # packed in_proj with bias, no dropout
    x = torch.rand(b, t, d) * 2 - 1
    if fwd_only:
        # PyTorch's best forward: eval mode under inference_mode takes MultiheadAttention's fast
        # path (torch._native_multi_head_attention); loom's side uses an inference executor
        m.eval()
        with torch.inference_mode():
            r = time_calls(p, lambda: m(x, x, x, need_weights=False))
        r["flop"] = mha_flop(b, t, d)
        return r

    def step():
        m.zero_grad(set_to_none=True)
        out, _ = m(x, x, x, need_weights=False)
        out.sum().backward()

    r = time_calls(p, step)
    r["flop"] = 3 * mha_flop(b, t, d)
    return r


def torch_gqa(torch, p, backward):
    """Grouped-query attention as PyTorch 2's F.scaled_dot_product_attention(enable_gqa=True) does
    it, written out (1.13 has no SDPA): the key/value heads repeated to the query heads
    (repeat_interleave: a copy), causal mask, softmax, weights·V; forward + backward of sum(out)."""
    b, hq, hkv, t, d = GQA["b"], GQA["hq"], GQA["hkv"], GQA["t"], GQA["d"]
    gen = torch.Generator().manual_seed(1)
    q = (torch.rand(b, hq, t, d, generator=gen) * 2 - 1).requires_grad_(backward)
    k = (torch.rand(b, hkv, t, d, generator=gen) * 2 - 1).requires_grad_(backward)
    v = (torch.rand(b, hkv, t, d, generator=gen) * 2 - 1).requires_grad_(backward)
    hidden = torch.ones(t, t, dtype=torch.bool).triu(1)
    rss_before = peak_rss_mib()

    def attend():
        kk, vv = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
        s = (q @ kk.transpose(-2, -1)) / math.sqrt(d)
        return torch.softmax(s.masked_fill(hidden, -math.inf), dim=-1) @ vv

    if backward:
        def step():
            q.grad = k.grad = v.grad = None
            attend().sum().backward()
        r = time_calls(p, step)
    else:
        with torch.inference_mode():
            r = time_calls(p, attend)
    r["flop"] = (3 if backward else 1) * gqa_flop()
    r["kv_expanded_mib"] = 2 * b * hq * t * d * 4 / 2 ** 20
    r["rss_baseline_mib"], r["rss_peak_mib"] = rss_before, peak_rss_mib()
    return r


def torch_train(torch, p, c):
    nn = torch.nn
    gen = Lcg(1234)
    B, L, V = c["batch"], c["len"], c["tgt_vocab"]
    src = torch.tensor([[gen.next_id(c["src_vocab"]) for _ in range(L)] for _ in range(B)])
    target = torch.tensor([[gen.next_id(V) for _ in range(L)] for _ in range(B)])
    tgt = torch.cat([torch.ones(B, 1, dtype=torch.long), target[:, :-1]], dim=1)  # BOS = 1, then y[:-1]
    src_pad = torch.zeros(B, L, dtype=torch.bool)  # every source position valid
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(L)

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            d = c["d"]
            self.scale = math.sqrt(d)
            self.src_embed = nn.Embedding(c["src_vocab"], d)
            self.tgt_embed = nn.Embedding(V, d)
            self.transformer = nn.Transformer(d, c["h"], c["enc"], c["dec"], c["ffn"], dropout=0.0, batch_first=True)
            self.generator = nn.Linear(d, V)
            self.register_buffer("pe", sinusoid_table(torch, L, d))

        def forward(self, src, tgt):
            x = self.src_embed(src) * self.scale + self.pe[: src.shape[1]]
            y = self.tgt_embed(tgt) * self.scale + self.pe[: tgt.shape[1]]
            h = self.transformer(x, y, tgt_mask=tgt_mask, src_key_padding_mask=src_pad,
                                 memory_key_padding_mask=src_pad)
            return self.generator(h)

    rss_before = peak_rss_mib()  # the process baseline, just before building the model
    torch.manual_seed(1)
    model = Seq2Seq()
    model.train()
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(src, tgt).reshape(-1, V), target.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())

    r = time_calls(p, step)
    r.update(flop=3 * seq2seq_flop(c), loss_first=losses[0], loss_timed_first=losses[r["warmup_calls"]],
             loss_last=losses[-1], steps=len(losses), rss_baseline_mib=rss_before, rss_peak_mib=peak_rss_mib(),
             params=sum(q.numel() for q in model.parameters()))
    return r


def torch_decode(torch, p):
    """Greedy decoding with a hand-written KV cache, the model of loom's nn::language_model:
    embed·√d + PE, per layer packed QKV, cached keys/values grown with torch.cat, softmax
    attention written with matmul, out projection, post-norm, ReLU FFN; final norm, lm head."""
    nn, F = torch.nn, torch.nn.functional
    d, h, V = LM["d"], LM["h"], LM["vocab"]
    dk = d // h
    n_prompt, n_new = LM["prompt"], LM["new_tokens"]

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj = nn.Linear(d, 3 * d)
            self.out_proj = nn.Linear(d, d)
            self.linear1, self.linear2 = nn.Linear(d, LM["ffn"]), nn.Linear(LM["ffn"], d)
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x, cache_k, cache_v):
            b, t, _ = x.shape
            q, k, v = self.in_proj(x).split(d, dim=-1)                       # [B, t, d] each
            q, k, v = (z.view(b, t, h, dk).transpose(1, 2) for z in (q, k, v))  # [B, h, t, dk]
            cache_k, cache_v = torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)  # [B, h, P+t, dk]
            scores = torch.matmul(q, cache_k.transpose(-2, -1)) / math.sqrt(dk)  # [B, h, t, P+t]
            if t > 1:  # causal within the new positions
                s = cache_k.shape[2]
                scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(s - t + 1), float("-inf"))
            a = torch.matmul(torch.softmax(scores, dim=-1), cache_v).transpose(1, 2).reshape(b, t, d)
            x = self.norm1(x + self.out_proj(a))
            x = self.norm2(x + self.linear2(F.relu(self.linear1(x))))
            return x, cache_k, cache_v

    class LanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, d)
            self.layers = nn.ModuleList([Layer() for _ in range(LM["layers"])])
            self.norm = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, V)
            self.register_buffer("pe", sinusoid_table(torch, n_prompt + n_new, d))

        def forward(self, tokens, start, caches):
            x = self.embed(tokens) * math.sqrt(d) + self.pe[start: start + tokens.shape[1]]
            new = []
            for layer, (ck, cv) in zip(self.layers, caches):
                x, ck, cv = layer(x, ck, cv)
                new.append((ck, cv))
            return self.lm_head(self.norm(x)), new

    torch.manual_seed(1)
    model = LanguageModel().eval()
    gen = Lcg(99)
    prompt = torch.tensor([[gen.next_id(V) for _ in range(n_prompt)]])

    def generate():
        empty = torch.empty(1, h, 0, dk)
        caches = [(empty, empty)] * LM["layers"]
        t0 = time.perf_counter()
        logits, caches = model(prompt, 0, caches)  # the prefill
        token = logits[:, -1].argmax(-1, keepdim=True)
        out = [token]
        t1 = time.perf_counter()
        for s in range(1, n_new):
            logits, caches = model(token, n_prompt + s - 1, caches)
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
        t2 = time.perf_counter()
        return torch.cat(out, dim=1)[0].tolist(), t1 - t0, t2 - t1

    with torch.inference_mode():
        w0, warm = time.perf_counter(), 0  # warm-up, as time_calls()
        while warm < p.warmup_calls or time.perf_counter() - w0 < p.warmup_seconds:
            generate()
            warm += 1
        per_token, prefill, total = [], [], []
        cpu0, t_all = time.process_time(), time.perf_counter()
        for _ in range(p.repetitions):
            toks, pre, dec = generate()
            per_token.append(dec / (n_new - 1))
            prefill.append(pre)
            total.append(pre + dec)
        cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - t_all)
    valid = len(toks) == n_new and all(0 <= t < V for t in toks)
    return {"median_s": statistics.median(per_token), "min_s": min(per_token), "reps_s": per_token,
            "prefill_s": statistics.median(prefill), "total_s": statistics.median(total), "tokens": len(toks),
            "steps": n_new - 1, "tokens_valid": int(valid), "cpu_per_wall": cpu_per_wall}


def torch_sgemm(torch, p, n_threads):
    """torch.mm of 1024³ under the threading setting (for reference; the ceiling is loom's)."""
    torch.manual_seed(0)
    a, b, c = torch.rand(1024, 1024), torch.rand(1024, 1024), torch.empty(1024, 1024)
    r = time_calls(p, lambda: torch.mm(a, b, out=c))
    r["flop"] = 2 * 1024 ** 3
    return r


def blas_threads():
    """OpenBLAS's thread count in this process (the library torch loaded), or None."""
    try:
        import ctypes
        return ctypes.CDLL("libopenblas.so.0").openblas_get_num_threads()
    except (OSError, AttributeError):
        return None


def run_torch_case(name, n, quick, threading):
    os.environ.update(threading_env(threading, n))  # before torch loads libgomp and OpenBLAS
    import torch
    if THREADING[threading]["interop1"]:
        torch.set_num_interop_threads(1)  # before any work
    torch.set_num_threads(int(THREADING[threading]["set_threads"].format(n=n)))
    p = Protocol(quick)
    m = re.match(r"mha_(fwd|fwdbwd)_b(\d+)_t(\d+)_d(\d+)_h(\d+)$", name)
    if m:
        r = torch_mha(torch, p, m.group(1) == "fwd", *(int(m.group(i)) for i in range(2, 6)))
    elif name == "tiny_train":
        r = torch_train(torch, p, TINY)
    elif name in ("small_train", "small_train_recompute"):
        r = torch_train(torch, p, SMALL)  # loom's recomputation is compared with PyTorch's plain step
    elif name in ("gqa_fwd", "gqa_fwdbwd"):
        r = torch_gqa(torch, p, name == "gqa_fwdbwd")
    elif name == "decode":
        r = torch_decode(torch, p)
    elif name == "sgemm":
        r = torch_sgemm(torch, p, n)
    else:
        raise SystemExit(f"bench_vs_torch.py: no case named {name!r}")
    head = {"framework": "torch", "case": name, "threads": n, "quick": int(quick), "threading": threading,
            "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            "blas_threads": blas_threads(), "torch_version": torch.__version__}
    print(json.dumps({**head, **r}))


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
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def fmt_time(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms" if s < 0.1 else f"{s * 1e3:.0f} ms"
    return f"{s * 1e6:.3g} µs"


LABELS = {"tiny_train": "train step, tiny enc–dec (d=64, h=4, 2+2, ffn 256, V=32, B=32, S=T=16)",
          "small_train": "train step, small enc–dec (d=256, h=8, 3+3, ffn 1024, V=1000, B=16, S=T=64)",
          "small_train_recompute": "the same, loom recomputing each layer in backward (PyTorch: its plain step)",
          "gqa_fwd": "GQA attention forward, causal (B=4, Hq=16, Hkv=4, T=S=512, d=64)",
          "gqa_fwdbwd": "GQA attention forward+backward, causal (B=4, Hq=16, Hkv=4, T=S=512, d=64)",
          "decode": "greedy decode, KV cache, per token (2 layers, d=256, h=8, ffn 1024, V=1000, prompt 16, 128 new)",
          "sgemm": "sgemm 1024³, time per product at full throughput (loom: N concurrent single-thread "
                   "calls through its BLAS; PyTorch: torch.mm on N threads)",
          "fma_peak": "FP32 FMA peak: N threads of independent vector FMAs on registers (time per call)"}


def seconds(r):
    """The median time of a result; for sgemm, per 1024³ product (loom runs N of them at once)."""
    return r["median_s"] * (2 * 1024 ** 3 / r["flop"] if r["case"] == "sgemm" else 1)


def gflops(r):
    return r["flop"] / r["median_s"] * 1e-9


def pct_of(r, peak):
    """r's GFLOP/s as a percentage of the fma_peak result `peak` (same thread count)."""
    return f"{100 * gflops(r) / gflops(peak):.0f}%"


def label(name):
    m = re.match(r"mha_(fwd|fwdbwd)_b(\d+)_t(\d+)_d(\d+)_h(\d+)$", name)
    if m:
        what = "MHA forward" if m.group(1) == "fwd" else "MHA forward+backward"
        return f"{what} (B={m.group(2)}, T={m.group(3)}, d={m.group(4)}, h={m.group(5)})"
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
      f"{'3' if meta['quick'] else '7'} timed repetitions after warm-up, float32, each framework and case "
      f"in its own process" + (f"; {meta['rounds']} rounds, one after the other, and each framework's faster "
                                "round counts (a note shows rounds more than 15% apart)" if meta["rounds"] > 1 else ""))
    w(f"- loom {meta['commit']}; PyTorch {meta['torch_version']}; {meta['cpu']}, {meta['ncpu']} CPUs; "
      f"OpenBLAS {meta['blas']} for both")
    w("- PyTorch threading (see `THREADING` in scripts/bench_vs_torch.py; where two are listed, both ran and "
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
            elif name == "decode":
                for r, who in ((lo, "loom"), (to, "PyTorch")):
                    if r:
                        notes.append(f"{who}: prefill {fmt_time(r['prefill_s'])}, 128 tokens {fmt_time(r['total_s'])}"
                                     + ("" if r["tokens_valid"] else " **(no valid tokens!)**"))
            elif lo and "flop" in lo:
                notes.append(f"GFLOP/s {lo['flop'] / lo['median_s'] * 1e-9:.1f} vs "
                             f"{to['flop'] / to['median_s'] * 1e-9:.1f}" if to else "")
                if peak:
                    notes.append(f"% of FMA peak {pct_of(lo, peak)}" + (f" vs {pct_of(to, peak)}" if to else ""))
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
          "`seq2seq_flop` in scripts/bench_vs_torch.py, forward × 3; ceiling = 1024³ sgemm through loom's "
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

    start = time.time()
    load_start = loadavg()
    results = []
    idle = Idle(0 if args.quick else args.max_wait, args.wait_budget)
    rounds = 1 if args.quick else args.rounds
    runs = [(rnd, name, n, fw, setting) for rnd in range(1, rounds + 1) for name in names for n in threads
            for fw, setting in [("loom", None)] + [("torch", t) for t in settings[n][:1 if args.quick else None]
                                                   if name not in LOOM_ONLY]]
    for k, (rnd, name, n, fw, setting) in enumerate(runs, 1):
        busy = idle.wait()
        if fw == "loom":
            cmd = [binary, "--case", name, "--threads", str(n), "--json"]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--torch-case", name, "--threads", str(n),
                   "--torch-threading", setting]
        if args.quick:
            cmd.append("--quick")
        r = run_measured(cmd)
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
    meta = {"quick": args.quick, "rounds": rounds, "commit": git_commit(root), "torch_version": torch_version, "cpu": cpu_model(),
            "ncpu": ncpu, "threading": settings, "load_start": load_start, "load_end": loadavg(),
            "others_mean": statistics.mean(others), "others_max": max(others),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"), "duration_s": time.time() - start,
            "blas": "pthread build, OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "auto")}
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
    idle = Idle(0 if args.quick else args.max_wait, args.wait_budget)
    for n in threads:
        for setting in settings:
            for name in names:
                busy = idle.wait()
                cmd = [sys.executable, os.path.abspath(__file__), "--torch-case", name, "--threads", str(n),
                       "--torch-threading", setting] + (["--quick"] if args.quick else [])
                r = run_measured(cmd)
                rows.append((n, setting, name, r, busy))
                print(f"{n} {setting:14s} {name:28s} {fmt_time(r['median_s']):>10s} cpu/wall "
                      f"{r.get('cpu_per_wall', float('nan')):.2f} blas {r['blas_threads']} "
                      f"others {r['others_busy_pct']:.0f}%", file=sys.stderr, flush=True)
    print(f"\nPyTorch threading settings (median; cpu/wall in brackets; load average now {loadavg()})\n")
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
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    ap.add_argument("--torch-sweep", action="store_true", help="compare PyTorch's threading settings")
    args = ap.parse_args()
    if args.torch_case:
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
