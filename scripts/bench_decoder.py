#!/usr/bin/python3
"""examples/llama's model in loom and in PyTorch, side by side, in one run.

loom: bench/bench_decoder (forward + backward + Adam on 16 windows of 64 characters; per-token
decode through the KV cache after a prefill of 8). PyTorch: the reference of
scripts/decoder_reference.py on the same configuration in float32, with torch.optim.Adam, and a
KV cache of its own for decoding (keys rotated once, concatenated per step). Each is the median
of --reps timed runs after 3 warm-up runs, at each thread count; the table gives loom / PyTorch
time ratios (below 1: loom faster).

PyTorch runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (set, they force OpenBLAS onto
older kernels and slow PyTorch down): the script starts itself again without them.

usage: /usr/bin/python3 scripts/bench_decoder.py --loom build/bench/bench_decoder [--threads 1,2] [--reps 20]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_reference as ref  # noqa: E402

# examples/llama_config.hpp, with the vocabulary of its text (32 characters)
CONFIG = {"family": "llama", "d_model": 64, "heads": 4, "kv_heads": 2, "ffn": 176, "layers": 2, "vocab": 32,
          "eps": 1e-5, "theta": 10000.0, "layout": "rotate_half", "tied": True, "max_positions": 64}
BATCH, WINDOW, PREFILL = 16, 64, 8


def weights(c):
    return {n: (0.02 * torch.randn(s) if not n.endswith("norm.weight") else torch.ones(s)).requires_grad_(True)
            for n, s in ref.shapes(c).items()}


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def torch_train_ms(c, reps):
    w = weights(c)
    opt = torch.optim.Adam(list(w.values()), lr=1e-3)
    tokens = torch.randint(0, c["vocab"], (BATCH, WINDOW))
    target = torch.randint(0, c["vocab"], (BATCH, WINDOW))
    times = []
    for r in range(reps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ref.llama_logits(c, w, tokens).reshape(-1, c["vocab"]), target.reshape(-1))
        loss.backward()
        opt.step()
        if r >= 3:
            times.append(time.perf_counter() - t0)
    return 1e3 * median(times)


def llama_step(c, w, tokens, p0, cache):
    """The reference with a KV cache: new tokens [1, n] at positions p0.., cache[i] = (k, v)."""
    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"]) * g

    n = tokens.shape[1]
    pos = torch.arange(p0, p0 + n)[None]
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = ref.rope(ref.heads(h @ w[p + "self_attn.q_proj.weight"].T, c["heads"]), pos, c["theta"], c["layout"])
        k = ref.rope(ref.heads(h @ w[p + "self_attn.k_proj.weight"].T, c["kv_heads"]), pos, c["theta"], c["layout"])
        v = ref.heads(h @ w[p + "self_attn.v_proj.weight"].T, c["kv_heads"])
        if i in cache:
            k = torch.cat([cache[i][0], k], 2)
            v = torch.cat([cache[i][1], v], 2)
        cache[i] = (k, v)
        group = c["heads"] // c["kv_heads"]
        kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if n > 1:
            keys = torch.arange(kk.shape[2])[None, :]
            scores = scores.masked_fill(keys > (p0 + torch.arange(n))[:, None], float("-inf"))
        x = x + ref.merge(torch.softmax(scores, -1) @ vv) @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) @ \
            w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T


def torch_decode_ms(c, reps):
    w = {n: t.detach() for n, t in weights(c).items()}
    prompt = torch.randint(0, c["vocab"], (1, WINDOW))
    # the cached reference is the full forward's: checked once before timing
    with torch.no_grad():
        cache = {}
        got = [llama_step(c, w, prompt[:, :PREFILL], 0, cache)]
        for p in range(PREFILL, WINDOW):
            got.append(llama_step(c, w, prompt[:, p:p + 1], p, cache))
        full = ref.llama_logits(c, w, prompt)
        assert ref.rel_error(torch.cat(got, 1), full) < 1e-4, "the cached reference differs from the full forward"
    times = []
    with torch.no_grad():
        for r in range(reps + 3):
            cache = {}
            llama_step(c, w, prompt[:, :PREFILL], 0, cache)
            t0 = time.perf_counter()
            for p in range(PREFILL, WINDOW):
                llama_step(c, w, prompt[:, p:p + 1], p, cache)
            if r >= 3:
                times.append((time.perf_counter() - t0) / (WINDOW - PREFILL))
    return 1e3 * median(times)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return f"{fields.get('Model name', '?').strip()}, CPU family {fields.get('CPU family', '?').strip()} " \
               f"model {fields.get('Model', '?').strip()}"
    except OSError:
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loom", required=True, help="the bench_decoder program")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{time.strftime('%Y-%m-%d')}  {cpu_model()}  torch {torch.__version__}  "
          f"(OPENBLAS_CORETYPE unset for PyTorch)")
    print(f"{'case':20} {'threads':>7} {'loom ms':>10} {'torch ms':>10} {'loom/torch':>11}")
    for n in [int(x) for x in args.threads.split(",")]:
        out = subprocess.run([args.loom, "--threads", str(n), "--reps", str(args.reps)], capture_output=True,
                             text=True, check=True).stdout
        loom = {r["case"]: r["ms"] for r in (json.loads(line) for line in out.splitlines() if line.strip())}
        torch.set_num_threads(n)
        peer = {"llama_train_step": torch_train_ms(CONFIG, args.reps), "llama_decode": torch_decode_ms(CONFIG, args.reps)}
        for case in ("llama_train_step", "llama_decode"):
            print(f"{case:20} {n:>7} {loom[case]:>10.3f} {peer[case]:>10.3f} {loom[case] / peer[case]:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
