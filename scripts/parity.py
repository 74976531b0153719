#!/usr/bin/python3
"""loom side by side with PyTorch: same weights, same inputs -> same outputs and gradients.

For each case a random PyTorch module is built from a fixed seed (in float64); its state_dict,
its inputs (in loom's batch-first layout), a random cotangent W, its output and the gradients
of L = sum(out * W) with respect to every parameter and input are written as safetensors
files to a temporary directory. tests/parity_runner (C++) loads the weights with loom's
PyTorch importer, runs the matching loom graph forward and backward in double and in float,
and writes its results back; this script compares them:

    max relative error = max|loom - torch| / max|torch|, per tensor, worst over the tensors
    double: <= 1e-5, float: <= 1e-4   (both against PyTorch in float64)

batch_first=False modules take [T, B, D]: the script transposes into and out of them, so
every file is batch-first. Decoding cases compare loom's prefill + one-token cached steps with
PyTorch's full decoder output at every position. Exits non-zero on any failure.

usage: /usr/bin/python3 scripts/parity.py --runner build/tests/parity_runner [--keep DIR] [case...]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_check as st  # noqa: E402  (json + struct + torch.frombuffer, no `safetensors` package)

TOLERANCE = {"f64": 1e-5, "f32": 1e-4}
B = 2

# --------------------------------------------------------------------------- the cases
# The same names as tests/parity_attention.cpp and tests/parity_transformer.cpp.

MHA_D, MHA_T, MHA_S = 8, 5, 7
MHA_CASES = {
    # name: kind, heads, masks, batch_first, layout, bias
    "mha_self_h1": ("self", 1, [], True, "packed", True),
    "mha_self_h2_causal": ("self", 2, ["causal_float"], False, "packed", True),
    "mha_self_h4_boolmask": ("self", 4, ["bool"], True, "packed", True),
    "mha_self_h2_padding": ("self", 2, ["padding"], False, "packed", True),
    "mha_self_h4_causal_padding_separate": ("self", 4, ["causal_float", "padding"], True, "separate", True),
    "mha_self_h1_causal_nobias": ("self", 1, ["causal_bool"], False, "packed", False),
    "mha_cross_h1_padding": ("cross", 1, ["padding"], False, "packed", True),
    "mha_cross_h2_boolmask_separate": ("cross", 2, ["bool"], True, "separate", True),
    "mha_cross_h4_padding": ("cross", 4, ["padding"], True, "packed", True),
    "mha_self_h2_causal_bias_false": ("self", 2, ["causal_float"], True, "packed", False),
    "mha_cross_h2_padding_bias_false": ("cross", 2, ["padding"], False, "packed", False),
    "mha_self_h2_float_mask": ("self", 2, ["float"], True, "packed", True),
    "mha_self_h2_mask_per_sequence": ("self", 2, ["per_sequence"], True, "packed", True),
    "mha_self_h4_key_mask_holes": ("self", 4, ["key_holes"], False, "packed", True),
    "mha_fully_masked_rows": ("self", 2, ["padding_empty"], True, "packed", True),
}

TF_D, TF_S, TF_T = 16, 6, 5
DEFAULT_MASKS = ["src_len", "causal"]  # loom's default: src_key/memory_key_padding_mask as lengths, causal tgt
TF_CASES = {
    # name: norm_first, activation, batch_first, decode, masks (nn.Transformer.forward's, see transformer_case)
    "transformer_post_relu": (False, "relu", False, False, DEFAULT_MASKS),
    "transformer_pre_relu": (True, "relu", True, False, DEFAULT_MASKS),
    "transformer_post_gelu": (False, "gelu", True, False, DEFAULT_MASKS),
    "transformer_pre_gelu": (True, "gelu", False, False, DEFAULT_MASKS),
    "transformer_src_mask": (False, "relu", True, False, ["src_mask", "causal"]),
    "transformer_tgt_mask_bool": (False, "relu", False, False, ["tgt_mask"]),
    "transformer_memory_mask": (True, "relu", True, False, ["memory_mask", "causal"]),
    "transformer_src_key_padding": (False, "relu", True, False, ["src_keys", "causal"]),
    "transformer_tgt_key_padding": (True, "gelu", False, False, ["tgt_keys", "causal"]),
    "transformer_memory_key_padding": (False, "gelu", True, False, ["memory_keys", "causal"]),
    "transformer_all_six_masks": (False, "relu", True, False,
                                  ["src_mask", "src_keys", "tgt_mask", "tgt_keys", "memory_mask", "memory_keys"]),
    "transformer_post_relu_decode": (False, "relu", True, True, DEFAULT_MASKS),
    "transformer_pre_gelu_decode": (True, "gelu", False, True, DEFAULT_MASKS),
}


def seed_of(name):
    return sum(ord(c) * (i + 1) for i, c in enumerate(name)) % 100003


def randomize(module):
    """Non-trivial values everywhere (PyTorch initialises biases to 0 and norms to 1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.uniform_(0.7, 1.3)
            elif name.endswith("bias"):
                p.uniform_(-0.3, 0.3)


def to_separate(m):
    """The separate-projection layout (PyTorch's when kdim/vdim differ from embed_dim), here with
    kdim = vdim = embed_dim: q/k/v_proj_weight are the row blocks of in_proj_weight."""
    d = m.embed_dim
    w = m.in_proj_weight.detach()
    m._qkv_same_embed_dim = False
    m.register_parameter("in_proj_weight", None)
    for i, n in enumerate(("q_proj_weight", "k_proj_weight", "v_proj_weight")):
        m.register_parameter(n, nn.Parameter(w[i * d:(i + 1) * d].clone()))


def layout(t, batch_first):
    """Loom's [B, T, D] to the module's layout and back (a transpose is its own inverse)."""
    return t if batch_first else t.transpose(0, 1)


def mha_case(name):
    kind, heads, masks, batch_first, proj, bias = MHA_CASES[name]
    torch.manual_seed(seed_of(name))
    m = nn.MultiheadAttention(MHA_D, heads, bias=bias, batch_first=batch_first).double()
    randomize(m)
    if proj == "separate":
        to_separate(m)
    m.eval()
    S = MHA_T if kind == "self" else MHA_S
    x = torch.randn(B, MHA_T, MHA_D, dtype=torch.float64, requires_grad=True)
    inputs = {"x": x}
    if kind == "cross":
        inputs["memory"] = torch.randn(B, S, MHA_D, dtype=torch.float64, requires_grad=True)
    kwargs, loom_inputs = {}, {}
    for mask in masks:
        if mask == "causal_float":
            kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(MHA_T).double()
        elif mask == "causal_bool":
            kwargs["attn_mask"] = torch.ones(MHA_T, S, dtype=torch.bool).triu(1)  # True: may NOT attend
        elif mask == "bool":
            allowed = torch.rand(MHA_T, S) < 0.6
            allowed[torch.arange(MHA_T), torch.randint(0, S, (MHA_T,))] = True  # no fully masked row
            kwargs["attn_mask"] = ~allowed
            loom_inputs["mask"] = allowed
        elif mask in ("padding", "padding_empty"):
            lengths = [S, 0] if mask == "padding_empty" else [S, S - 2]
            kwargs["key_padding_mask"] = torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]  # True: ignore
            loom_inputs["len"] = torch.tensor(lengths)  # int64, PyTorch's default: loom converts it
        elif mask == "float":  # added to the scores; its gradient is compared too
            fmask = torch.randn(MHA_T, S, dtype=torch.float64)
            fmask[1, 3] = -math.inf
            inputs["fmask"] = fmask.requires_grad_()
            kwargs["attn_mask"] = inputs["fmask"]
        elif mask == "per_sequence":  # loom [B, T, S] for every head; PyTorch (B·H, T, S), True: NOT allowed
            allowed = torch.rand(B, MHA_T, S) < 0.6
            allowed[:, torch.arange(MHA_T), torch.randint(0, S, (MHA_T,))] = True
            kwargs["attn_mask"] = (~allowed).repeat_interleave(heads, dim=0)
            loom_inputs["mask"] = allowed
        elif mask == "key_holes":  # keys hidden anywhere, not only at the end (loom: True may attend)
            keys = torch.rand(B, S) < 0.6
            keys[:, 0] = True
            kwargs["key_padding_mask"] = ~keys
            loom_inputs["keys"] = keys
    q = layout(x, batch_first)
    kv = q if kind == "self" else layout(inputs["memory"], batch_first)
    out, _ = m(q, kv, kv, need_weights=False, **kwargs)
    return m, inputs, loom_inputs, layout(out, batch_first)


def transformer_case(name):
    norm_first, act, batch_first, _, masks = TF_CASES[name]
    torch.manual_seed(seed_of(name))
    model = nn.Module()  # the Transformer as a submodule: its names carry "transformer."
    model.embed = nn.Embedding(7, TF_D)  # not the Transformer's: the importer leaves it alone
    model.transformer = nn.Transformer(d_model=TF_D, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                       dim_feedforward=32, dropout=0.0, activation=act, batch_first=batch_first,
                                       norm_first=norm_first)
    model = model.double()
    randomize(model.transformer)
    model.eval()
    src = torch.randn(B, TF_S, TF_D, dtype=torch.float64, requires_grad=True)
    tgt = torch.randn(B, TF_T, TF_D, dtype=torch.float64, requires_grad=True)
    kwargs, loom_inputs = {}, {}

    def allowed(rows, cols, keep=None):  # a random bool mask, True may attend, no row left empty
        a = torch.rand(rows, cols) < 0.6
        a[torch.arange(rows), torch.randint(0, cols, (rows,)) if keep is None else keep] = True
        return a
    for mask in masks:
        if mask == "src_len":  # src_key_padding_mask and memory_key_padding_mask, as loom's lengths
            lengths = torch.tensor([TF_S, TF_S - 2])  # int64, PyTorch's default
            padding = torch.arange(TF_S)[None, :] >= lengths[:, None]  # True: ignore
            kwargs.update(src_key_padding_mask=padding, memory_key_padding_mask=padding)
            loom_inputs["src_len"] = lengths
        elif mask == "causal":
            kwargs["tgt_mask"] = nn.Transformer.generate_square_subsequent_mask(TF_T).double()
        elif mask == "src_mask":  # float [S, S], added
            m = torch.randn(TF_S, TF_S, dtype=torch.float64)
            m[0, 2] = -math.inf
            kwargs["src_mask"], loom_inputs["src_mask"] = m, m
        elif mask == "tgt_mask":  # bool [T, T], PyTorch True = NOT allowed; causal plus random holes
            a = allowed(TF_T, TF_T, keep=torch.arange(TF_T)) & torch.ones(TF_T, TF_T, dtype=torch.bool).tril()
            a[:, 0] = True  # key 0 for every query, which the key masks never hide either
            kwargs["tgt_mask"], loom_inputs["tgt_mask"] = ~a, a
        elif mask == "memory_mask":  # float [T, S], added
            m = torch.randn(TF_T, TF_S, dtype=torch.float64)
            m[1, 2] = -math.inf
            kwargs["memory_mask"], loom_inputs["memory_mask"] = m, m
        elif mask in ("src_keys", "tgt_keys", "memory_keys"):  # [B, keys] with holes; PyTorch True = ignore
            n = TF_T if mask == "tgt_keys" else TF_S
            a = torch.rand(B, n) < 0.6
            a[:, 0] = True  # with a causal target, query 0 sees key 0 only
            kwargs[mask.replace("keys", "key_padding_mask")], loom_inputs[mask] = ~a, a
    out = model.transformer(layout(src, batch_first), layout(tgt, batch_first), **kwargs)
    return model, {"src_x": src, "tgt_x": tgt}, loom_inputs, layout(out, batch_first)


# --------------------------------------------------------------------------- scaled dot-product attention

SDPA_B, SDPA_T, SDPA_S, SDPA_D, SDPA_DV = 2, 5, 7, 4, 3
SDPA_CASES = {
    # name: Hq, Hkv, scale (None: 1/sqrt(d)), is_causal, masks, dropout p
    "sdpa_default": (2, 2, None, False, [], 0.0),
    "sdpa_scale": (2, 2, 0.3, False, [], 0.0),
    "sdpa_causal": (2, 2, None, True, [], 0.0),
    "sdpa_bool_ts": (2, 2, None, False, ["bool_ts"], 0.0),
    "sdpa_bool_b1ts": (2, 2, None, False, ["bool_b1ts"], 0.0),
    "sdpa_float_ts": (2, 2, None, False, ["float_ts"], 0.0),
    "sdpa_float_b1ts": (2, 2, None, False, ["float_b1ts"], 0.0),
    "sdpa_float_bhts": (2, 2, None, False, ["float_bhts"], 0.0),
    "sdpa_padding_int64": (2, 2, None, False, ["len"], 0.0),
    "sdpa_gqa2_causal": (4, 2, None, True, [], 0.0),
    "sdpa_gqa4_float_b1ts": (8, 2, None, False, ["float_b1ts"], 0.0),
    "sdpa_mqa_bool_ts": (4, 1, None, False, ["bool_ts"], 0.0),
    "sdpa_dropout": (2, 2, None, False, [], 0.3),
    "sdpa_all_options": (4, 2, 0.5, True, ["bool_b1ts", "float_bhts", "len"], 0.0),
}
DROPOUT_SEED = [5, 9]

M64 = (1 << 64) - 1


def splitmix_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def dropout_keep(n, p, seed, node_hash):
    """loom's dropout mask, from its documented formula (include/loom/ops/dropout.hpp): element i
    is kept when the top 53 bits of splitmix64's output i for the node's key are >= p * 2^53."""
    words = ((seed[0] & 0xFFFFFFFF) << 32) | (seed[1] & 0xFFFFFFFF)
    key = splitmix_mix(splitmix_mix(words) ^ node_hash)
    threshold = math.ceil(p * 2.0 ** 53)
    return torch.tensor([(splitmix_mix((key + (i + 1) * 0x9E3779B97F4A7C15) & M64) >> 11) >= threshold
                         for i in range(n)])


def sdpa_reference(q, k, v, scale, causal, allowed=None, added=None, lengths=None, dropout=0.0, keep=None):
    """PyTorch 2's F.scaled_dot_product_attention written out (1.13 does not have it), with loom's
    bottom-right causal alignment: query i sees keys j <= i + (S - T)."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:  # enable_gqa: each key/value head serves hq / hkv query heads
        k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
    s = (q @ k.transpose(-2, -1)) * scale
    t, n = s.shape[-2:]
    if causal:
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(t)[:, None] + (n - t), -math.inf)
    if allowed is not None:
        s = s.masked_fill(~allowed, -math.inf)
    if added is not None:
        s = s + added
    if lengths is not None:
        s = s.masked_fill(torch.arange(n)[None, None, None, :] >= lengths[:, None, None, None], -math.inf)
    w = torch.softmax(s, dim=-1)
    if dropout > 0:
        w = w * keep.reshape(w.shape) / (1 - dropout)
    return w @ v


def sdpa_case(name, keys):
    hq, hkv, scale, causal, masks, p = SDPA_CASES[name]
    torch.manual_seed(seed_of(name))
    b, t, n = SDPA_B, SDPA_T, SDPA_S
    q = torch.randn(b, hq, t, SDPA_D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, hkv, n, SDPA_D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, hkv, n, SDPA_DV, dtype=torch.float64, requires_grad=True)
    inputs, loom_inputs, args = {"q": q, "k": k, "v": v}, {}, {}
    for mask in masks:
        if mask.startswith("bool"):
            shape = [t, n] if mask == "bool_ts" else [b, 1, t, n]
            a = torch.rand(shape) < 0.6
            a[..., torch.arange(t), 0] = True  # key 0 for every query: no row left empty (with causal too)
            args["allowed"], loom_inputs["mask"] = a, a
        elif mask.startswith("float"):
            shape = {"float_ts": [t, n], "float_b1ts": [b, 1, t, n], "float_bhts": [b, hq, t, n]}[mask]
            f = torch.randn(shape, dtype=torch.float64)
            f[..., 1, 2] = -math.inf
            inputs["fmask"] = f.requires_grad_()
            args["added"] = inputs["fmask"]
        elif mask == "len":
            lengths = torch.tensor([n, n - 3])  # int64
            args["lengths"], loom_inputs["len"] = lengths, lengths
    if p > 0:
        loom_inputs["seed"] = torch.tensor(DROPOUT_SEED, dtype=torch.int32)
        args["dropout"], args["keep"] = p, dropout_keep(b * hq * t * n, p, DROPOUT_SEED, keys[name])
    out = sdpa_reference(q, k, v, scale if scale is not None else 1 / math.sqrt(SDPA_D), causal, **args)
    return nn.Module(), inputs, loom_inputs, out


def build(name, directory, keys):
    """Writes the case's files; returns what the comparison needs."""
    if name in MHA_CASES:
        module, inputs, loom_inputs, out = mha_case(name)
        params = dict(module.named_parameters())
        decode = False
    elif name in SDPA_CASES:
        module, inputs, loom_inputs, out = sdpa_case(name, keys)
        params, decode = {}, False
    else:
        module, inputs, loom_inputs, out = transformer_case(name)
        params = {n: p for n, p in module.named_parameters() if n.startswith("transformer.")}
        decode = TF_CASES[name][3]
    torch.manual_seed(seed_of(name) + 1)
    w = torch.randn_like(out)
    if not decode:
        (out * w).sum().backward()
    os.makedirs(directory, exist_ok=True)
    st.write(os.path.join(directory, "weights.safetensors"),
             {n: t.detach().contiguous() for n, t in module.state_dict().items()}, {"format": "pt"})
    files = {n: t.detach().contiguous() for n, t in inputs.items()}
    loom_inputs = {n: t.contiguous() for n, t in loom_inputs.items()}
    files.update(loom_inputs)
    if not decode:
        files["cotangent"] = w
    st.write(os.path.join(directory, "inputs.safetensors"), files, {})
    want = {"out": out.detach()}
    if not decode:
        want.update({"grad.input." + n: t.grad for n, t in inputs.items()})
        want.update({"grad.param." + n: p.grad for n, p in params.items()})
    state = {n: t.detach() for n, t in module.state_dict().items() if n in params}
    return want, state


# --------------------------------------------------------------------------- comparison

def rel_error(got, want):
    got, want = got.double(), want.double()
    if got.shape != want.shape or torch.isnan(got).any():
        return math.inf
    scale = want.abs().max().item() if want.numel() else 0.0
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    return diff / scale if scale > 0 else diff


def compare(name, want, state, loom, precision):
    """Worst relative error of the output and of the gradients, and a list of problems."""
    problems = []
    out_err, grad_err, worst = 0.0, 0.0, ""
    for key, w in want.items():
        if key not in loom:
            problems.append(f"loom did not write {key}")
            continue
        if name == "mha_fully_masked_rows":
            continue  # compared by fully_masked() instead
        e = rel_error(loom[key], w)
        if key == "out":
            out_err = e
        elif e > grad_err:
            grad_err, worst = e, key
    if precision == "f64":  # the loaded weights, exported back under PyTorch's names: bit for bit
        exported = {k[len("weights."):]: t for k, t in loom.items() if k.startswith("weights.")}
        if sorted(exported) != sorted(state):
            missing, extra = sorted(set(state) - set(exported)), sorted(set(exported) - set(state))
            problems.append(f"export: {len(missing)} names missing {missing[:3]}, {len(extra)} extra {extra[:3]}")
        elif any(not torch.equal(exported[n], state[n]) for n in state):
            problems.append("export: weights differ from the state_dict")
    return out_err, grad_err, worst, problems


def fully_masked(want, loom, state, precision):
    """PyTorch: NaN in the rows of the sequence whose keys are all masked; loom: zero attention
    weights there, so the output is out_proj.bias; the other rows agree."""
    problems = []
    torch_out, loom_out = want["out"], loom["out"].double()
    if not torch.isnan(torch_out[1]).all():
        problems.append("PyTorch no longer gives NaN for a fully masked row")
    if torch.isnan(loom_out).any():
        problems.append("loom gave NaN")
    bias = state["out_proj.bias"].expand_as(loom_out[1])
    err = max(rel_error(loom_out[0], torch_out[0]), rel_error(loom_out[1], bias))
    return err, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner", required=True, help="the parity_runner executable")
    parser.add_argument("--keep", help="write the files to this directory and keep them")
    parser.add_argument("cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    names = list(MHA_CASES) + list(TF_CASES) + list(SDPA_CASES)
    listed = subprocess.run([args.runner, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if sorted(listed) != sorted(names):
        print(f"parity_runner knows {sorted(listed)}, the script {sorted(names)}: keep the two lists equal")
        return 1
    names = [n for n in names if not args.cases or n in args.cases]

    temp = None if args.keep else tempfile.TemporaryDirectory(prefix="loom_parity_")
    root = args.keep or temp.name
    keys = {}  # the dropout nodes' structural hashes, which key loom's random streams
    for line in subprocess.run([args.runner, "--keys"], check=True, capture_output=True, text=True).stdout.splitlines():
        case, value = line.split()
        keys[case] = int(value)
    expected = {n: build(n, os.path.join(root, n), keys) for n in names}
    sys.stdout.flush()
    runner = subprocess.run([args.runner, root] + names)

    failed = runner.returncode != 0
    print(f"\n{'case':38} {'out f64':>9} {'grad f64':>9} {'out f32':>9} {'grad f32':>9}  worst gradient")
    for n in names:
        want, state = expected[n]
        cells, notes, case_failed = [], [], False
        for precision in ("f64", "f32"):
            path = os.path.join(root, n, f"loom_{precision}.safetensors")
            if not os.path.exists(path):
                cells += ["missing", "missing"]
                case_failed = True
                continue
            loom, _, _ = st.read(path)
            out_err, grad_err, worst, problems = compare(n, want, state, loom, precision)
            if n == "mha_fully_masked_rows":
                out_err, more = fully_masked(want, loom, state, precision)
                problems += more
                cells += [f"{out_err:9.1e}", "      —"]
            elif n in TF_CASES and TF_CASES[n][3]:
                cells += [f"{out_err:9.1e}", "      —"]
            else:
                cells += [f"{out_err:9.1e}", f"{grad_err:9.1e}"]
            if precision == "f64" and worst:
                notes.append(worst)
            if max(out_err, grad_err) > TOLERANCE[precision] or problems:
                case_failed = True
                notes += [f"{precision}: {p}" for p in problems]
        failed |= case_failed
        print(f"{n:38} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {cells[3]:>9}  {'; '.join(notes)}"
              + ("  FAILED" if case_failed else ""))
    print(f"\ntolerance: double {TOLERANCE['f64']:.0e}, float {TOLERANCE['f32']:.0e} (max|loom - torch| / max|torch| "
          f"per tensor, against PyTorch {torch.__version__} in float64)")
    print("mha_fully_masked_rows: PyTorch gives NaN for the sequence with no valid key; loom gives zero attention "
          "weights (output = out_proj.bias), compared with that.")
    print("FAILED" if failed else "all cases agree")
    if temp:
        temp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
