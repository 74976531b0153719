#!/usr/bin/python3
"""The cases of scripts/bench_vs_torch.py on the PyTorch side: threading settings, shapes,
FLOP counts and one function per case, each timed with the same protocol as bench/bench_vs_torch.cpp.
Imported by bench_vs_torch.py, which runs each case in a fresh process (--torch-case).
"""

import json
import math
import os
import re
import resource
import statistics
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
    return names + ["tiny_train", "small_train", "small_train_recompute", "gqa_fwd", "gqa_fwdbwd", "decode", "decode_b8",
                    "decode_b8_packed", "decode_t512", "decode_int8", "decode_int8_t512", "sgemm",
                    "fma_peak", "read_bw_memory", "read_bw_decode", "decode_gemv", "decode_gemv_int8",
                    "mha_fwd_b1_t1024_d512_h8_bf16", "mha_fwdbwd_b1_t1024_d512_h8_bf16", "tiny_train_bf16",
                    "small_train_bf16"]


# Cases PyTorch has no side of: the machine's FMA peak, which every GFLOP/s figure is read against,
# its read bandwidth (from memory, and over the decode case's weight bytes), and the decode case's
# weight GEMVs alone (read against the latter); loom's decoding with int8 weights (read
# against decode and decode_t512, and decode_gemv) and with its weights packed once
# (exec_options::pack_weights, read against decode_b8). The bf16 cases (*_bf16: loom's
# exec_options::precision = bf16) have PyTorch's CPU autocast to bfloat16 as their peer.
LOOM_ONLY = {"fma_peak", "read_bw_memory", "read_bw_decode", "decode_gemv", "decode_int8", "decode_int8_t512",
             "decode_gemv_int8", "decode_b8_packed"}


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
    name = name.removesuffix("_bf16")  # the same products in bf16
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


def torch_mha(torch, p, fwd_only, b, t, d, h, bf16=False):
    """bf16: forward and backward under CPU autocast to bfloat16 (its products in bf16, float32
    weights); the forward alone with the module and input in bfloat16 (1.13's fast path below
    refuses autocast: "expected scalar type BFloat16 but found Float")."""
    torch.manual_seed(42)
    m = torch.nn.MultiheadAttention(d, h, batch_first=True)  # packed in_proj with bias, no dropout
    x = torch.rand(b, t, d) * 2 - 1
    cast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)  # noqa: E731
    if fwd_only:
        # PyTorch's best forward: eval mode under inference_mode takes MultiheadAttention's fast
        # path (torch._native_multi_head_attention); loom's side uses an inference executor
        m.eval()
        if bf16:
            m, x = m.to(torch.bfloat16), x.to(torch.bfloat16)
        with torch.inference_mode():
            r = time_calls(p, lambda: m(x, x, x, need_weights=False))
        r["flop"] = mha_flop(b, t, d)
        return r

    def step():
        m.zero_grad(set_to_none=True)
        with cast():
            out, _ = m(x, x, x, need_weights=False)
        out.float().sum().backward()

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


def torch_train(torch, p, c, bf16=False, checkpoint=False):
    """bf16: the forward and the loss under CPU autocast to bfloat16 (float32 master weights).
    checkpoint: each encoder and decoder layer through torch.utils.checkpoint (its activations
    recomputed in backward, as loom's transformer_config::recompute does), the final norms as
    nn.Transformer applies them."""
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
            if not checkpoint:
                h = self.transformer(x, y, tgt_mask=tgt_mask, src_key_padding_mask=src_pad,
                                     memory_key_padding_mask=src_pad)
                return self.generator(h)
            from torch.utils.checkpoint import checkpoint as ckpt
            enc, dec = self.transformer.encoder, self.transformer.decoder
            m = x
            for layer in enc.layers:  # forward(src, src_mask, src_key_padding_mask)
                m = ckpt(layer, m, None, src_pad, use_reentrant=False)
            m = enc.norm(m)
            h = y
            for layer in dec.layers:  # forward(tgt, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm)
                h = ckpt(layer, h, m, tgt_mask, None, None, src_pad, use_reentrant=False)
            return self.generator(dec.norm(h))

    rss_before = peak_rss_mib()  # the process baseline, just before building the model
    torch.manual_seed(1)
    model = Seq2Seq()
    model.train()
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(src, tgt).reshape(-1, V), target.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())

    r = time_calls(p, step)
    r.update(flop=3 * seq2seq_flop(c), loss_first=losses[0], loss_timed_first=losses[r["warmup_calls"]],
             loss_last=losses[-1], steps=len(losses), rss_baseline_mib=rss_before, rss_peak_mib=peak_rss_mib(),
             params=sum(q.numel() for q in model.parameters()))
    return r


def language_model(torch, batch=1, n_new=None):
    """The model of loom's nn::language_model in PyTorch (seeded), and the decode case's prompt:
    embed·√d + PE, per layer packed QKV, cached keys/values grown with torch.cat, softmax
    attention written with matmul, out projection, post-norm, ReLU FFN; final norm, lm head.
    Its forward(tokens, start, caches) returns (logits, caches). `batch` prompts [batch, prompt]:
    the first is the single-sequence case's (the same generator, as loom's bench)."""
    nn, F = torch.nn, torch.nn.functional
    d, h, V = LM["d"], LM["h"], LM["vocab"]
    dk = d // h
    n_prompt, n_new = LM["prompt"], n_new or LM["new_tokens"]  # the positional table's length

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
    prompt = torch.tensor([[gen.next_id(V) for _ in range(n_prompt)] for _ in range(batch)])
    return model, prompt


def torch_decode(torch, p, batch=1, n_new=None):
    """Greedy decoding with a hand-written KV cache (language_model): the prefill of the prompts,
    then one token per sequence per step (n_new tokens; default LM's)."""
    h, V = LM["h"], LM["vocab"]
    dk = LM["d"] // h
    n_prompt, n_new = LM["prompt"], n_new or LM["new_tokens"]
    model, prompt = language_model(torch, batch, n_new)

    def generate():
        empty = torch.empty(batch, h, 0, dk)
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
        return torch.cat(out, dim=1).tolist(), t1 - t0, t2 - t1

    with torch.inference_mode():
        w0, warm = time.perf_counter(), 0  # warm-up, as time_calls()
        while warm < p.warmup_calls or time.perf_counter() - w0 < p.warmup_seconds:
            generate()
            warm += 1
        per_token, prefill, total = [], [], []
        cpu0, t_all = time.process_time(), time.perf_counter()
        for _ in range(p.repetitions):
            seqs, pre, dec = generate()
            per_token.append(dec / (n_new - 1))
            prefill.append(pre)
            total.append(pre + dec)
        cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - t_all)
    valid = len(seqs) == batch and all(len(toks) == n_new and all(0 <= t < V for t in toks) for toks in seqs)
    return {"median_s": statistics.median(per_token), "min_s": min(per_token), "reps_s": per_token,
            "prefill_s": statistics.median(prefill), "total_s": statistics.median(total), "tokens": len(seqs[0]),
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
    # subnormals flushed to zero, as loom's float executors do by default (exec_options::subnormals):
    # on Intel CPUs the gradients reaching the first attention layers are partly subnormal, slow there
    torch.set_flush_denormal(True)
    p = Protocol(quick)
    m = re.match(r"mha_(fwd|fwdbwd)_b(\d+)_t(\d+)_d(\d+)_h(\d+)(_bf16)?$", name)
    if m:
        r = torch_mha(torch, p, m.group(1) == "fwd", *(int(m.group(i)) for i in range(2, 6)), bf16=bool(m.group(6)))
    elif name in ("tiny_train", "tiny_train_bf16"):
        r = torch_train(torch, p, TINY, name.endswith("_bf16"))
    elif name in ("small_train", "small_train_bf16"):
        r = torch_train(torch, p, SMALL, name.endswith("_bf16"))
    elif name == "small_train_recompute":  # loom's recomputation beside PyTorch's (torch.utils.checkpoint)
        r = torch_train(torch, p, SMALL, checkpoint=True)
    elif name in ("gqa_fwd", "gqa_fwdbwd"):
        r = torch_gqa(torch, p, name == "gqa_fwdbwd")
    elif name == "decode":
        r = torch_decode(torch, p)
    elif name == "decode_b8":
        r = torch_decode(torch, p, 8)
    elif name == "decode_t512":
        r = torch_decode(torch, p, 1, 512)
    elif name == "sgemm":
        r = torch_sgemm(torch, p, n)
    else:
        raise SystemExit(f"bench_vs_torch.py: no case named {name!r}")
    head = {"framework": "torch", "case": name, "threads": n, "quick": int(quick), "threading": threading,
            "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            "blas_threads": blas_threads(), "torch_version": torch.__version__}
    print(json.dumps({**head, **r}))
