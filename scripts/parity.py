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
    "mha_fully_masked_rows": ("self", 2, ["padding_empty"], True, "packed", True),
}

TF_D, TF_S, TF_T = 16, 6, 5
TF_CASES = {
    # name: norm_first, activation, batch_first, decode
    "transformer_post_relu": (False, "relu", False, False),
    "transformer_pre_relu": (True, "relu", True, False),
    "transformer_post_gelu": (False, "gelu", True, False),
    "transformer_pre_gelu": (True, "gelu", False, False),
    "transformer_post_relu_decode": (False, "relu", True, True),
    "transformer_pre_gelu_decode": (True, "gelu", False, True),
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
            loom_inputs["len"] = torch.tensor(lengths, dtype=torch.int32)
    q = layout(x, batch_first)
    kv = q if kind == "self" else layout(inputs["memory"], batch_first)
    out, _ = m(q, kv, kv, need_weights=False, **kwargs)
    return m, inputs, loom_inputs, layout(out, batch_first)


def transformer_case(name):
    norm_first, act, batch_first, _ = TF_CASES[name]
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
    lengths = torch.tensor([TF_S, TF_S - 2], dtype=torch.int32)
    padding = torch.arange(TF_S)[None, :] >= lengths[:, None]  # True: ignore
    causal = nn.Transformer.generate_square_subsequent_mask(TF_T).double()
    out = model.transformer(layout(src, batch_first), layout(tgt, batch_first), tgt_mask=causal,
                            src_key_padding_mask=padding, memory_key_padding_mask=padding)
    return model, {"src_x": src, "tgt_x": tgt}, {"src_len": lengths}, layout(out, batch_first)


def build(name, directory):
    """Writes the case's files; returns what the comparison needs."""
    if name in MHA_CASES:
        module, inputs, loom_inputs, out = mha_case(name)
        params = dict(module.named_parameters())
        decode = False
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

    names = list(MHA_CASES) + list(TF_CASES)
    listed = subprocess.run([args.runner, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if sorted(listed) != sorted(names):
        print(f"parity_runner knows {sorted(listed)}, the script {sorted(names)}: keep the two lists equal")
        return 1
    names = [n for n in names if not args.cases or n in args.cases]

    temp = None if args.keep else tempfile.TemporaryDirectory(prefix="loom_parity_")
    root = args.keep or temp.name
    expected = {n: build(n, os.path.join(root, n)) for n in names}
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
            elif TF_CASES.get(n, (0, 0, 0, False))[3]:
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
