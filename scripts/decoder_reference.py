#!/usr/bin/python3
"""Reference Llama-style and GPT-2-style decoders in PyTorch, and loom's parity with them.

The two references are written here from the architectures' definitions (the `transformers`
package is not used):

  llama  x = embed_tokens[tokens]; per layer
           h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),  n = rmsnorm(x)
           x = h + down_proj(silu(gate_proj(m)) * up_proj(m)),                 m = rmsnorm(h)
         logits = lm_head(rmsnorm(x)) (or embed_tokens when tied); no biases anywhere.
         rmsnorm(x) = x * rsqrt(mean(x^2) + eps) * w; query head h reads kv head h // (H / Hkv);
         rope: inv_freq_i = theta^(-2i/Dh), angle = pos * inv_freq_i, "rotate half" pairs
         (i, i + Dh/2) or "interleaved" pairs (2i, 2i + 1).
  gpt2   x = wte[tokens] + wpe[0..T-1]; per layer
           q|k|v = ln_1(x) @ c_attn.weight + c_attn.bias  (Conv1D: weights [in, out])
           h = x + attn(q, k, v) @ attn.c_proj.weight + bias
           x = h + gelu_new(ln_2(h) @ mlp.c_fc.weight + bias) @ mlp.c_proj.weight + bias
         logits = ln_f(x) @ wte^T;  gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

For each case the script draws random weights (seeded, float64), rounds them to the stored dtype
(F32 or BF16), and writes them as a Hugging Face checkpoint folder: config.json and
model.safetensors, or shards with model.safetensors.index.json. It writes the inputs (tokens,
target) and computes, in float64 from the stored values, the reference logits, the mean
cross-entropy and the gradient of that loss for every tensor. The C++ runner
(tests/decoder_parity.cpp) loads the folder with loom's loader (which checks config.json
against the model's compile-time config), runs forward and backward in double and in float,
and prefill + one-token steps through the KV cache; this script compares:

    max relative error = max|loom - ref| / max|ref|, per tensor, worst over the tensors
    double: <= 1e-10;  float: <= 1e-5 (logits, loss, decode, gradients)

Then it checks refusals: a folder whose config.json has a wrong field, one missing a tensor
and one with a mis-shaped tensor must each be refused with one message naming the fault.

usage: /usr/bin/python3 scripts/decoder_reference.py --runner build/tests/decoder_parity [--keep DIR] [case...]
       /usr/bin/python3 scripts/decoder_reference.py --check-folder DIR
           (DIR as examples/llama writes it: the reference reads DIR/checkpoint, a folder loom saved,
           and must give the logits loom wrote to DIR/check.safetensors)
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_check as st  # noqa: E402  (json + struct + torch.frombuffer)

TOLERANCE = {"f64": {"out": 1e-10, "grad": 1e-10}, "f32": {"out": 1e-5, "grad": 1e-5}}
B, T, PREFILL = 2, 7, 4

# The configurations: the same as the compile-time ones of tests/decoder_parity.cpp.
CONFIGS = {
    "llama": {"family": "llama", "d_model": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "layers": 2, "vocab": 37,
              "eps": 1e-5, "theta": 10000.0, "layout": "rotate_half", "tied": False, "max_positions": 64},
    "llama_mqa_tied": {"family": "llama", "d_model": 32, "heads": 4, "kv_heads": 1, "ffn": 40, "layers": 1,
                       "vocab": 29, "eps": 1e-6, "theta": 500000.0, "layout": "rotate_half", "tied": True,
                       "max_positions": 64},
    "gpt2": {"family": "gpt2", "d_model": 32, "heads": 4, "ffn": 128, "layers": 2, "vocab": 41, "eps": 1e-5,
             "max_positions": 16},
}

# case: config, stored dtype, shard size in bytes (0: one file)
CASES = {
    "llama_f32": ("llama", torch.float32, 0),
    "llama_bf16_sharded": ("llama", torch.bfloat16, 20000),
    "llama_mqa_tied_f32_sharded": ("llama_mqa_tied", torch.float32, 12000),
    "gpt2_f32": ("gpt2", torch.float32, 0),
    "gpt2_bf16_sharded": ("gpt2", torch.bfloat16, 16000),
}


# --------------------------------------------------------------------------- the references

def hf_config(c):
    """config.json of a configuration, with the fields Hugging Face's classes read."""
    if c["family"] == "llama":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["d_model"],
                "intermediate_size": c["ffn"], "num_attention_heads": c["heads"],
                "num_key_value_heads": c["kv_heads"], "num_hidden_layers": c["layers"], "vocab_size": c["vocab"],
                "rms_norm_eps": c["eps"], "rope_theta": c["theta"], "tie_word_embeddings": c["tied"],
                "hidden_act": "silu", "max_position_embeddings": c["max_positions"], "attention_bias": False,
                "torch_dtype": "float32"}
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": c["d_model"], "n_head": c["heads"],
            "n_layer": c["layers"], "n_positions": c["max_positions"], "n_inner": None, "vocab_size": c["vocab"],
            "layer_norm_epsilon": c["eps"], "activation_function": "gelu_new", "tie_word_embeddings": True}


def shapes(c):
    """Every tensor of the checkpoint: name -> shape."""
    d, f, v = c["d_model"], c["ffn"], c["vocab"]
    s = {}
    if c["family"] == "llama":
        dh = d // c["heads"]
        s["model.embed_tokens.weight"] = [v, d]
        for i in range(c["layers"]):
            p = f"model.layers.{i}."
            s[p + "input_layernorm.weight"] = [d]
            s[p + "post_attention_layernorm.weight"] = [d]
            s[p + "self_attn.q_proj.weight"] = [c["heads"] * dh, d]
            s[p + "self_attn.k_proj.weight"] = [c["kv_heads"] * dh, d]
            s[p + "self_attn.v_proj.weight"] = [c["kv_heads"] * dh, d]
            s[p + "self_attn.o_proj.weight"] = [d, c["heads"] * dh]
            s[p + "mlp.gate_proj.weight"] = [f, d]
            s[p + "mlp.up_proj.weight"] = [f, d]
            s[p + "mlp.down_proj.weight"] = [d, f]
        s["model.norm.weight"] = [d]
        if not c["tied"]:
            s["lm_head.weight"] = [v, d]
    else:
        s["transformer.wte.weight"] = [v, d]
        s["transformer.wpe.weight"] = [c["max_positions"], d]
        for i in range(c["layers"]):
            p = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):
                s[p + ln + ".weight"] = [d]
                s[p + ln + ".bias"] = [d]
            s[p + "attn.c_attn.weight"] = [d, 3 * d]
            s[p + "attn.c_attn.bias"] = [3 * d]
            s[p + "attn.c_proj.weight"] = [d, d]
            s[p + "attn.c_proj.bias"] = [d]
            s[p + "mlp.c_fc.weight"] = [d, f]
            s[p + "mlp.c_fc.bias"] = [f]
            s[p + "mlp.c_proj.weight"] = [f, d]
            s[p + "mlp.c_proj.bias"] = [d]
        s["transformer.ln_f.weight"] = [d]
        s["transformer.ln_f.bias"] = [d]
    return s


def random_weights(c, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in shapes(c).items():
        if name.endswith("norm.weight") or ".ln_" in name and name.endswith(".weight"):
            w[name] = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            w[name] = 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    return w


def rope(x, pos, theta, layout):
    """x [B, H, T, Dh] rotated at positions pos [B, T]."""
    dh = x.shape[-1]
    h = dh // 2
    inv = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # [h]
    angle = pos[:, None, :, None].to(torch.float64) * inv  # [B, 1, T, h]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    if layout == "rotate_half":
        a, b = x[..., :h], x[..., h:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)


def causal_attention(q, k, v):
    """q [B, H, T, Dh], k and v [B, Hkv, T, Dh]: query head h reads kv head h // (H / Hkv)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    t = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, -1) @ v


def heads(x, n):
    b, t, _ = x.shape
    return x.reshape(b, t, n, -1).transpose(1, 2)


def merge(x):
    b, _, t, _ = x.shape
    return x.transpose(1, 2).reshape(b, t, -1)


def llama_logits(c, w, tokens):
    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"]) * g

    bsz, t = tokens.shape
    pos = torch.arange(t).expand(bsz, t)
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        n = rms(x, w[p + "input_layernorm.weight"])
        q = rope(heads(n @ w[p + "self_attn.q_proj.weight"].T, c["heads"]), pos, c["theta"], c["layout"])
        k = rope(heads(n @ w[p + "self_attn.k_proj.weight"].T, c["kv_heads"]), pos, c["theta"], c["layout"])
        v = heads(n @ w[p + "self_attn.v_proj.weight"].T, c["kv_heads"])
        x = x + merge(causal_attention(q, k, v)) @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        gated = F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)
        x = x + gated @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if c["tied"] else w["lm_head.weight"]
    return x @ head.T


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_logits(c, w, tokens):
    d = c["d_model"]
    t = tokens.shape[1]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]
    for i in range(c["layers"]):
        p = f"transformer.h.{i}."
        a = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], c["eps"])
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, -1)
        o = merge(causal_attention(heads(q, c["heads"]), heads(k, c["heads"]), heads(v, c["heads"])))
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], c["eps"])
        hidden = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + hidden @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], c["eps"])
    return x @ w["transformer.wte.weight"].T


def logits_of(c, w, tokens):
    return llama_logits(c, w, tokens) if c["family"] == "llama" else gpt2_logits(c, w, tokens)


# --------------------------------------------------------------------------- the folder

def write_folder(folder, c, stored, shard_bytes):
    """A Hugging Face checkpoint folder: config.json and the tensors, in one file or shards."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
    names = sorted(stored)
    if shard_bytes == 0:
        st.write(os.path.join(folder, "model.safetensors"), stored, {"format": "pt"})
        return
    shards, current, size = [], [], 0
    for n in names:
        nbytes = stored[n].numel() * stored[n].element_size()
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(n)
        size += nbytes
    shards.append(current)
    weight_map, total = {}, 0
    for k, part in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        st.write(os.path.join(folder, file), {n: stored[n] for n in part}, {"format": "pt"})
        for n in part:
            weight_map[n] = file
            total += stored[n].numel() * stored[n].element_size()
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def build(name, directory):
    config_name, dtype, shard_bytes = CASES[name]
    c = CONFIGS[config_name]
    seed = sum(ord(ch) for ch in name)
    stored = {n: t.to(dtype) for n, t in random_weights(c, seed).items()}
    folder = os.path.join(directory, name)
    write_folder(os.path.join(folder, "checkpoint"), c, stored, shard_bytes)

    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, c["vocab"], (B, T), generator=g)
    target = torch.randint(0, c["vocab"], (B, T), generator=g)
    st.write(os.path.join(folder, "inputs.safetensors"), {"tokens": tokens, "target": target}, {})

    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in stored.items()}
    logits = logits_of(c, w, tokens)
    loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), target.reshape(-1))
    loss.backward()
    want = {"logits": logits.detach(), "loss": loss.detach().reshape([])}
    for n, t in w.items():
        want["grad." + n] = t.grad
    return config_name, want


# --------------------------------------------------------------------------- the checks

def rel_error(got, want):
    got, want = got.to(torch.float64), want.to(torch.float64)
    if got.shape != want.shape:
        return float("inf")
    scale = want.abs().max().item() if want.numel() else 0.0
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    return diff / scale if scale > 0 else diff


def compare(name, want, loom, precision):
    ok = True
    worst = {"out": (0.0, ""), "grad": (0.0, "")}
    for key, ref in want.items():
        kind = "grad" if key.startswith("grad.") else "out"
        if key not in loom:
            print(f"  {name} [{precision}]: loom wrote no {key}")
            ok = False
            continue
        e = rel_error(loom[key], ref)
        if e > worst[kind][0]:
            worst[kind] = (e, key)
    # the cached decode: prefill + one-token steps, every position against the full logits
    e = rel_error(loom["decode_logits"], want["logits"])
    if e > worst["out"][0]:
        worst["out"] = (e, "decode_logits")
    for kind, (e, key) in worst.items():
        limit = TOLERANCE[precision][kind]
        verdict = "ok" if e <= limit else "FAIL"
        ok = ok and e <= limit
        print(f"  {name} [{precision}] {kind:4}: worst {e:.2e} ({key}) limit {limit:.0e} {verdict}")
    return ok


def refusals(runner, directory):
    """A wrong config field, a missing tensor and a mis-shaped tensor: each refused, named."""
    source = os.path.join(directory, "llama_f32", "checkpoint")
    ok = True

    def attempt(label, mutate, expect):
        nonlocal ok
        folder = os.path.join(directory, "refuse_" + label)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(source, os.path.join(folder, "checkpoint"))
        mutate(os.path.join(folder, "checkpoint"))
        r = subprocess.run([runner, "--refusal", "llama", folder], capture_output=True, text=True)
        message = (r.stdout + r.stderr).strip()
        good = r.returncode == 3 and all(e in message for e in expect)
        ok = ok and good
        print(f"  refusal {label}: {'ok' if good else 'FAIL'}: {message.splitlines()[-1] if message else '(nothing)'}")

    def config_change(**fields):
        def mutate(folder):
            path = os.path.join(folder, "config.json")
            with open(path) as f:
                cfg = json.load(f)
            cfg.update(fields)
            with open(path, "w") as f:
                json.dump(cfg, f)
        return mutate

    def edit_tensors(change):
        def mutate(folder):
            path = os.path.join(folder, "model.safetensors")
            tensors, metadata, _ = st.read(path)
            change(tensors)
            st.write(path, tensors, metadata)
        return mutate

    attempt("config_field", config_change(num_key_value_heads=4), ["num_key_value_heads", "file 4", "model 2"])
    # a variant loom does not build (Llama 3.1's scaled RoPE) is refused by name, not run wrongly
    attempt("config_variant", config_change(rope_scaling={"rope_type": "llama3", "factor": 8.0}), ["rope_scaling"])
    attempt("missing_tensor", edit_tensors(lambda t: t.pop("model.layers.1.mlp.up_proj.weight")),
            ["model.layers.1.mlp.up_proj.weight", "missing"])
    attempt("wrong_shape", edit_tensors(lambda t: t.update({"model.norm.weight": torch.ones(31)})),
            ["model.norm.weight", "[31]", "[32]"])
    return ok


def config_from_hf(cfg):
    """A configuration (as in CONFIGS) from a folder's config.json."""
    if cfg.get("model_type") == "llama":
        return {"family": "llama", "d_model": cfg["hidden_size"], "heads": cfg["num_attention_heads"],
                "kv_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                "ffn": cfg["intermediate_size"], "layers": cfg["num_hidden_layers"], "vocab": cfg["vocab_size"],
                "eps": cfg.get("rms_norm_eps", 1e-6), "theta": cfg.get("rope_theta", 10000.0),
                "layout": "rotate_half", "tied": cfg.get("tie_word_embeddings", False),
                "max_positions": cfg.get("max_position_embeddings", 2048)}
    if cfg.get("model_type") == "gpt2":
        return {"family": "gpt2", "d_model": cfg["n_embd"], "heads": cfg["n_head"],
                "ffn": cfg.get("n_inner") or 4 * cfg["n_embd"], "layers": cfg["n_layer"], "vocab": cfg["vocab_size"],
                "eps": cfg.get("layer_norm_epsilon", 1e-5), "max_positions": cfg["n_positions"]}
    raise SystemExit(f"config.json: model_type {cfg.get('model_type')!r} is neither llama nor gpt2")


def read_folder(folder):
    """The tensors of a Hugging Face folder: model.safetensors, or the shards its index names."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return st.read(os.path.join(folder, "model.safetensors"))[0]
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for file in sorted(set(weight_map.values())):
        tensors.update(st.read(os.path.join(folder, file))[0])
    return tensors


def check_folder(directory):
    """DIR/checkpoint (a folder loom saved) run by the reference on DIR/check.safetensors' tokens
    gives the logits loom wrote there (loom ran in float: <= 1e-5 relative)."""
    folder = os.path.join(directory, "checkpoint")
    with open(os.path.join(folder, "config.json")) as f:
        c = config_from_hf(json.load(f))
    w = {n: t.to(torch.float64) for n, t in read_folder(folder).items()}
    check, _, _ = st.read(os.path.join(directory, "check.safetensors"))
    with torch.no_grad():
        want = logits_of(c, w, check["tokens"].to(torch.int64))
    e = rel_error(check["logits"], want)
    ok = e <= TOLERANCE["f32"]["out"]
    print(f"  {folder}: PyTorch reference logits vs loom's: {e:.2e} {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner")
    parser.add_argument("--keep", help="write the cases here and keep them")
    parser.add_argument("--check-folder", metavar="DIR",
                        help="run the reference on DIR/checkpoint and compare with DIR/check.safetensors")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    if args.check_folder:
        return check_folder(args.check_folder)
    if not args.runner:
        parser.error("--runner is required")
    torch.manual_seed(0)
    names = args.cases or list(CASES)
    directory = args.keep or tempfile.mkdtemp(prefix="loom_decoder_parity_")
    ok = True
    try:
        for name in names:
            config_name, want = build(name, directory)
            folder = os.path.join(directory, name)
            r = subprocess.run([args.runner, config_name, folder], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"  {name}: the runner failed ({r.returncode}):\n{r.stdout}{r.stderr}")
                ok = False
                continue
            for precision in ("f64", "f32"):
                loom, _, _ = st.read(os.path.join(folder, f"loom_{precision}.safetensors"))
                ok = compare(name, want, loom, precision) and ok
        if "llama_f32" in names:
            ok = refusals(args.runner, directory) and ok
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print("decoder parity: " + ("all cases agree" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
