#!/usr/bin/env python3
"""safetensors files between loom and PyTorch, without the `safetensors` package.

Reads and writes the format with json + struct + torch.frombuffer:
  8-byte little-endian u64 N | N bytes of JSON header | data (offsets relative to its start)

Commands:
  dump FILE                       print a file's header and tensors
  roundtrip --helper EXE --dir D  the CTest test: EXE (tests/safetensors_interop) writes files that
                                  Python checks bit for bit, then Python writes a file that EXE checks
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import torch

DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64,
    "U8": torch.uint8, "BOOL": torch.bool, "F16": torch.float16, "BF16": torch.bfloat16,
}
NAMES = {v: k for k, v in DTYPES.items()}

# The same list, in the same order, as `specs` in tests/safetensors_interop.cpp.
TENSORS = [
    ("encoder.layers.0.self_attn.in_proj_weight", [6, 4]),
    ("encoder.layers.0.self_attn.in_proj_bias", [6]),
    ("decoder.norm.weight", [4]),
    ("scalar", []),
    ("special", [6]),
    ("empty", [0, 3]),
]
SPECIAL = [0.0, -0.0, 1e-30, 3.4e38, -1.0 / 3.0, 1e-45]
# Floats whose rounding to bf16 and f16 is a decision: ties (to even), the edges of the
# subnormals and of the largest finite values, infinities and a NaN.
HALF_SPECIAL = [1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504.0, 65519.99609375, 65520.0,
                2 ** -24, 2 ** -25, 3 * 2 ** -25, 2 ** -14 - 2 ** -25, 2 ** -133, 2 ** -134, 3.4028234663852886e38,
                3.3895313892515355e38, float("inf"), float("-inf"), float("nan"), -0.0, 0.1, -1.0 / 3.0]


def expected(t, dtype):
    """Tensor number t of TENSORS, its values computed in double and rounded once to dtype."""
    name, shape = TENSORS[t]
    n = 1
    for d in shape:
        n *= d
    if name == "special":
        values = SPECIAL
    else:
        values = [((i * 37 + t * 11) % 101 - 50) / 7.0 for i in range(n)]
    return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)


def read(path):
    """Returns ({name: tensor}, metadata, header) and checks the layout rules on the way."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) >= 8, f"{path}: shorter than 8 bytes"
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), f"{path}: header length {n} past the end"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = bytearray(raw[8 + n:])
    metadata = header.pop("__metadata__", {})
    tensors, spans = {}, []
    for name, info in header.items():
        assert set(info) == {"dtype", "shape", "data_offsets"}, f"{name}: fields {set(info)}"
        dtype = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        spans.append((begin, end))
        count = 1
        for d in info["shape"]:
            count *= d
        assert end - begin == count * torch.empty((), dtype=dtype).element_size(), f"{name}: size"
        if count == 0:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
        else:
            tensors[name] = torch.frombuffer(data, dtype=dtype, count=count, offset=begin).reshape(info["shape"]).clone()
    covered = 0
    for begin, end in sorted(spans):
        assert begin == covered, f"{path}: gap or overlap at byte {begin}"
        covered = end
    assert covered == len(data), f"{path}: data section {len(data)} bytes, tensors cover {covered}"
    return tensors, metadata, header


def write(path, tensors, metadata):
    """Writes tensors in reverse name order (loom writes in name order: offsets need not be sorted)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors, reverse=True):
        t = tensors[name].contiguous()
        # numpy has no bfloat16: its bytes go through int16
        blob = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        chunks.append(blob)
        offset += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    int_type = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
                torch.float16: torch.int16}[a.dtype]
    return torch.equal(a.view(int_type), b.view(int_type))


def check_loom_files(directory):
    failures = []
    for suffix, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        path = os.path.join(directory, f"from_loom_{suffix}.safetensors")
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        if (8 + n) % 8:
            failures.append(f"{path}: data section not 8-byte aligned")
        tensors, metadata, _ = read(path)
        if metadata != {"framework": "loom", "step": "3"}:
            failures.append(f"{path}: metadata {metadata}")
        if sorted(tensors) != sorted(name for name, _ in TENSORS):
            failures.append(f"{path}: names {sorted(tensors)}")
        for t, (name, _) in enumerate(TENSORS):
            if name in tensors and not same_bits(tensors[name], expected(t, dtype)):
                failures.append(f"{path}: {name} = {tensors[name]} differs from {expected(t, dtype)}")
    # 16-bit files: loom rounds the float values as torch does (to nearest even), bit for bit.
    for suffix, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        tensors, _, _ = read(os.path.join(directory, f"from_loom_{suffix}.safetensors"))
        for t, (name, _) in enumerate(TENSORS):
            want = expected(t, torch.float32).to(dtype)
            if name not in tensors or not same_bits(tensors[name], want):
                failures.append(f"from_loom_{suffix}: {name} = {tensors.get(name)} differs from torch's {want}")
    # The checkpoint: parameters after one torch.optim.Adam step with gradients 0.5, and its moments.
    tensors, metadata, _ = read(os.path.join(directory, "from_loom_ckpt.safetensors"))
    if metadata.get("optimizer") != "adam" or metadata.get("optimizer.step") != "1" or metadata.get("seed") != "42":
        failures.append(f"checkpoint metadata {metadata}")
    for t, (name, _) in enumerate(TENSORS):
        p = expected(t, torch.float32).clone().requires_grad_()
        p.grad = torch.full_like(p, 0.5)
        torch.optim.Adam([p], lr=0.01).step()
        if not torch.allclose(tensors[name], p.detach(), rtol=1e-6, atol=1e-7):
            failures.append(f"checkpoint {name}: {tensors[name]} vs torch.optim.Adam {p.detach()}")
        if not torch.allclose(tensors[f"optimizer.exp_avg.{name}"], torch.full_like(p, 0.05)):
            failures.append(f"checkpoint optimizer.exp_avg.{name}")
        if not torch.allclose(tensors[f"optimizer.exp_avg_sq.{name}"], torch.full_like(p, 0.00025)):
            failures.append(f"checkpoint optimizer.exp_avg_sq.{name}")
    return failures


def write_torch_file(directory):
    tensors = {name: expected(t, torch.float32) for t, (name, _) in enumerate(TENSORS)}
    tensors["scalar"] = expected(3, torch.float64)
    tensors["token_ids"] = torch.tensor([0, 1, -1, 2 ** 40, 7], dtype=torch.int64)
    tensors["mask"] = torch.tensor([True, False, True])
    # float32 values and torch's bf16 and f16 of them, and those widened back to float32
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(2000, generator=g) * torch.exp2(torch.randint(-40, 40, (2000,), generator=g).float())
    bits = torch.randint(-2 ** 31, 2 ** 31, (4000,), dtype=torch.int64, generator=g).to(torch.int32).view(torch.float32)
    bits = bits[~torch.isnan(bits)]  # torch writes every NaN as one pattern; loom keeps sign and payload
    values = torch.cat([torch.tensor(HALF_SPECIAL, dtype=torch.float32), spread, bits])
    tensors["half.f32"] = values
    for suffix, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        tensors[f"half.{suffix}"] = values.to(dtype)
        tensors[f"half.{suffix}.widened"] = values.to(dtype).to(torch.float32)
    write(os.path.join(directory, "from_torch.safetensors"), tensors, {"framework": "pytorch", "note": "ünïcode ✓"})


def roundtrip(helper, directory):
    os.makedirs(directory, exist_ok=True)
    subprocess.run([helper, "write", directory], check=True)
    failures = check_loom_files(directory)
    for f in failures:
        print("loom -> torch MISMATCH:", f)
    write_torch_file(directory)
    status = subprocess.run([helper, "check", directory]).returncode
    if status != 0:
        print("torch -> loom: the C++ check failed")
    if failures or status != 0:
        return 1
    print("loom -> torch and torch -> loom: every tensor bit for bit")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump")
    dump.add_argument("file")
    rt = sub.add_parser("roundtrip")
    rt.add_argument("--helper", required=True)
    rt.add_argument("--dir", required=True)
    args = parser.parse_args()
    if args.command == "dump":
        tensors, metadata, header = read(args.file)
        print("metadata:", metadata)
        for name, info in sorted(header.items()):
            print(f"{name}: {info['dtype']} {info['shape']} {info['data_offsets']}")
        return 0
    return roundtrip(args.helper, args.dir)


if __name__ == "__main__":
    sys.exit(main())
