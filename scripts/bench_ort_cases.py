#!/usr/bin/python3
"""The cases of scripts/bench_vs_torch.py on ONNX Runtime's side: the PyTorch models of
bench_torch_cases.py exported with torch.onnx (opset 17), run in onnxruntime-node 1.30 (CPU
execution provider, the native library bundled in the npm package) by scripts/bench_ort.js with
the same timing protocol, and checked against PyTorch in this process before any figure counts:
MHA forward outputs within 1e-4, decoding's greedy tokens identical.

Imported by bench_vs_torch.py, which runs each case in a fresh process (--ort-case). The npm
package is installed by scripts/bench_vs_torch into BUILD_DIR/ort (ORT_DIR).
"""

import json
import math
import os
import re
import subprocess
import tempfile

from bench_torch_cases import LM, Protocol, language_model, mha_flop

ORT_VERSION = "1.30.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def ort_cases(names):
    """The cases ONNX Runtime runs: MHA forward and KV-cached decoding."""
    return [n for n in names if re.match(r"mha_fwd_b\d+_t\d+_d\d+_h\d+$", n) or n == "decode"]


def ort_missing(ort_dir):
    """Why ONNX Runtime cannot run here (None when it can)."""
    if not ort_dir:
        return "no ORT_DIR given"
    if not os.path.isfile(os.path.join(ort_dir, "node_modules", "onnxruntime-node", "package.json")):
        return f"onnxruntime-node is not installed in {ort_dir}"
    try:
        subprocess.run(["node", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "node is not on PATH"
    return None


def run_node(spec, work, ort_dir):
    """Runs bench_ort.js on `spec` (written into `work`) with onnxruntime-node from ort_dir."""
    spec = {**spec, "ort_dir": os.path.abspath(ort_dir)}
    path = os.path.join(work, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    proc = subprocess.run(["node", os.path.join(HERE, "bench_ort.js"), path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_ort_cases: bench_ort.js failed:\n{proc.stderr}")
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def protocol_of(p):
    return {"warmup_calls": p.warmup_calls, "warmup_seconds": p.warmup_seconds, "repetitions": p.repetitions,
            "repetition_seconds": p.repetition_seconds}


def ort_mha(torch, p, work, node, n, b, t, d, h):
    """torch_mha's forward (nn.MultiheadAttention, packed in_proj with bias, eval) exported."""
    torch.manual_seed(42)
    m = torch.nn.MultiheadAttention(d, h, batch_first=True).eval()
    x = torch.rand(b, t, d) * 2 - 1

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x, x, x, need_weights=False)[0]

    model = os.path.join(work, "mha.onnx")
    with torch.no_grad():
        expected = SelfAttention()(x)
    # with gradients enabled, MultiheadAttention takes its composite path (the fused inference
    # kernel, aten::_native_multi_head_attention, has no ONNX export)
    torch.onnx.export(SelfAttention(), (x,), model, input_names=["x"], output_names=["y"], opset_version=17)
    x.numpy().astype("float32").tofile(os.path.join(work, "x.bin"))
    spec = {"mode": "call", "model": model, "threads": n, "protocol": protocol_of(p),
            "inputs": {"x": {"file": os.path.join(work, "x.bin"), "type": "float32", "dims": [b, t, d]}},
            "output_file": os.path.join(work, "y.bin")}
    r = node(spec)
    import numpy  # here, not at the top: the command-line tests import this module without numpy
    got = torch.from_numpy(numpy.fromfile(spec["output_file"], dtype="float32")).view(b, t, d)
    err = (got - expected).abs().max().item()
    if not err <= 1e-4:
        raise SystemExit(f"bench_ort_cases: ONNX Runtime's MHA output differs from PyTorch's by {err:.3g} (> 1e-4)")
    r["max_abs_error_vs_torch"] = err
    r["flop"] = mha_flop(b, t, d)
    return r


def ort_decode(torch, p, work, node, n):
    """torch_decode's model exported as two graphs: the prefill of the prompt (caches start
    empty) and the KV-cached step (one token, its position, past keys/values of any length in;
    logits and present keys/values out). Greedy decoding runs in bench_ort.js."""
    nn = torch.nn
    h, d, layers = LM["h"], LM["d"], LM["layers"]
    dk = d // h
    lm, prompt = language_model(torch)

    class Prefill(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, tokens):
            empty = torch.zeros(1, h, 0, dk)
            logits, caches = self.lm(tokens, 0, [(empty, empty)] * layers)
            return (logits, *[c for kv in caches for c in kv])

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, token, pos, *past):
            x = self.lm.embed(token) * math.sqrt(d) + self.lm.pe.index_select(0, pos).unsqueeze(0)
            present = []
            for i, layer in enumerate(self.lm.layers):
                x, ck, cv = layer(x, past[2 * i], past[2 * i + 1])
                present += [ck, cv]
            return (self.lm.lm_head(self.lm.norm(x)), *present)

    kv_names = lambda kind: [f"{kind}_{c}{i}" for i in range(layers) for c in "kv"]  # noqa: E731
    prefill_path, step_path = os.path.join(work, "prefill.onnx"), os.path.join(work, "step.onnx")
    with torch.no_grad():
        torch.onnx.export(Prefill(), (prompt,), prefill_path, input_names=["tokens"],
                          output_names=["logits"] + kv_names("present"), opset_version=17)
        past = [torch.zeros(1, h, LM["prompt"], dk) for _ in range(2 * layers)]
        torch.onnx.export(Step(), (torch.tensor([[0]]), torch.tensor([LM["prompt"]]), *past), step_path,
                          input_names=["token", "pos"] + kv_names("past"),
                          output_names=["logits"] + kv_names("present"), opset_version=17,
                          dynamic_axes={**{k: {2: "past"} for k in kv_names("past")},
                                        **{k: {2: "total"} for k in kv_names("present")}})
        # PyTorch's greedy tokens, which ONNX Runtime must reproduce exactly
        empty = torch.empty(1, h, 0, dk)
        logits, caches = lm(prompt, 0, [(empty, empty)] * layers)
        token = logits[:, -1].argmax(-1, keepdim=True)
        expected = [token.item()]
        for s in range(1, LM["new_tokens"]):
            logits, caches = lm(token, LM["prompt"] + s - 1, caches)
            token = logits[:, -1].argmax(-1, keepdim=True)
            expected.append(token.item())
    spec = {"mode": "decode", "prefill": prefill_path, "step": step_path, "threads": n, "protocol": protocol_of(p),
            "prompt": prompt[0].tolist(), "new_tokens": LM["new_tokens"], "layers": layers}
    r = node(spec)
    if r["token_ids"] != expected:
        first = next(i for i, (a, b) in enumerate(zip(r["token_ids"], expected)) if a != b)
        raise SystemExit(f"bench_ort_cases: ONNX Runtime's greedy tokens differ from PyTorch's from token {first}")
    r["tokens_valid"] = 1
    r["tokens_match_torch"] = 1
    del r["token_ids"]
    return r


def run_ort_case(name, n, quick, ort_dir):
    missing = ort_missing(ort_dir)
    if missing:
        raise SystemExit(f"bench_ort_cases: {missing}")
    import torch
    torch.set_num_threads(1)  # the export and the reference outputs only; ONNX Runtime has its own threads
    p = Protocol(quick)
    with tempfile.TemporaryDirectory(prefix="loom-ort-") as work:
        def node(spec):
            return run_node(spec, work, ort_dir)

        m = re.match(r"mha_fwd_b(\d+)_t(\d+)_d(\d+)_h(\d+)$", name)
        if m:
            r = ort_mha(torch, p, work, node, n, *(int(g) for g in m.groups()))
        elif name == "decode":
            r = ort_decode(torch, p, work, node, n)
        else:
            raise SystemExit(f"bench_ort_cases: ONNX Runtime has no side of case {name!r}")
    head = {"framework": "ort", "case": name, "threads": n, "quick": int(quick),
            "threading": f"intraOpNumThreads={n}, interOpNumThreads=1, sequential"}
    print(json.dumps({**head, **r}))
