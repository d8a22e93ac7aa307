#!/usr/bin/env python3
"""An independent float64 reference forward pass (llama, qwen2, qwen3) in NumPy, to tell
apart the differences between tierserve and llama.cpp that come from llama.cpp's own
arithmetic (activations rounded to Q8_0/Q8_K/F16/BF16 before each matrix product, K and V
stored as F16) from real bugs.

For each golden of tests/data/golden/oracle it rebuilds the model with make-model,
dequantizes every weight with gguf-py, runs the prompt in float64 and prints
max |reference - llama.cpp| per model, with and without emulating llama.cpp's F16 KV cache
and F16/BF16 activations. Optionally writes the reference logits (--dump DIR) as .npy.

    .venv/bin/python scripts/oracle/numpy_ref.py --build-dir build
"""
import argparse
import base64
import glob
import json
import os
import subprocess

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load(path):
    r = GGUFReader(path)
    def field(name):
        f = r.fields[name]
        v = f.parts[f.data[0]]
        return v.tobytes().decode() if f.types[0].name == "STRING" else v[0]
    arch = field("general.architecture")
    hp = {k: field(f"{arch}.{k}") for k in ("embedding_length", "block_count", "attention.head_count",
                                            "attention.head_count_kv", "rope.freq_base",
                                            "attention.layer_norm_rms_epsilon")}
    w, types = {}, {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim == 1 and len(t.shape) > 1 else a
        types[t.name] = t.tensor_type
        if t.tensor_type.name in ("Q4_1", "Q5_1"):  # per-block minimums, for the Q8_1 sum term
            bpb = 20 if t.tensor_type.name == "Q4_1" else 24
            raw = np.ascontiguousarray(t.data).reshape(-1, bpb)
            w[t.name + ":min"] = raw[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(a.shape[0], -1)
    return arch, hp, w, types


def rms_norm(x, wt, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * wt


def rope(x, pos, theta, neox):
    # x: [n_tok, n_head, d]
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]  # [n_tok, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def round_f16(x):
    return x.astype(np.float16).astype(np.float64)


def round_bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def simd_inv(amax):
    # ggml-cpu's x86 quantize_row_q8_0/q8_1: id = 127 / amax, rounding half to even.
    return np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)


def q8_blocks(x, qk, fp16_scale):
    """llama.cpp's activation quantizers: Q8_0/Q8_1 (blocks of 32, scale amax/127 stored
    as F16, q = round-half-even(x * 127/amax) as ggml-cpu's x86 code does) and Q8_K (blocks of 256, scale from the signed
    maximum, F32 scale, round half to even). Returns the dequantized values."""
    shp = x.shape
    b = x.astype(np.float32).reshape(-1, qk)
    if fp16_scale:
        amax = np.abs(b).max(1, keepdims=True)
        d = amax / np.float32(127)
        q = np.rint(b * simd_inv(amax))
        return (q * d.astype(np.float16).astype(np.float32)).astype(np.float64).reshape(shp)
    idx = np.abs(b).argmax(1)
    mx = b[np.arange(len(b)), idx][:, None]
    iscale = np.where(mx != 0, np.float32(-127) / np.where(mx != 0, mx, 1), 0).astype(np.float32)
    q = np.minimum(np.rint(iscale * b), 127)
    d = np.where(iscale != 0, np.float32(1) / np.where(iscale != 0, iscale, 1), 0).astype(np.float32)
    return (q * d).astype(np.float64).reshape(shp)


def q8_1(x):
    """Q8_1: the Q8_0 values plus s = F16(d * sum(q)) per block (d before its F16 rounding),
    which the Q4_1/Q5_1 dot products multiply by the weight block's minimum."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(1, keepdims=True)
    d = amax / np.float32(127)
    q = np.rint(b * simd_inv(amax))
    xq = (q * d.astype(np.float16).astype(np.float32)).astype(np.float64).reshape(x.shape)
    s = (d[:, 0] * q.sum(1)).astype(np.float16).astype(np.float64).reshape(x.shape[0], -1)
    return xq, s


# What llama.cpp converts activations to before a product with weights of each type.
def act_rounding(wtype):
    name = wtype.name
    if name == "F32":
        return lambda x: x
    if name == "F16":
        return round_f16
    if name == "BF16":
        return round_bf16
    if name.endswith("_K"):
        return lambda x: q8_blocks(x, 256, False)
    return lambda x: q8_blocks(x, 32, True)


def forward(arch, hp, w, ids, f16_kv, types=None):
    """emulate (types given): llama.cpp's rounding of activations before every product,
    of Q to F16 before Q.K and of the attention weights to F16 before their product with V."""
    def mm(x, name):
        if types is not None and types[name].name in ("Q4_1", "Q5_1"):
            xq, s = q8_1(x)
            mins = w[name + ":min"]
            return xq @ (w[name] - np.repeat(mins, 32, axis=1)).T + s @ mins.T
        if types is not None:
            x = act_rounding(types[name])(x)
        return x @ w[name].T

    n_embd, n_layer = int(hp["embedding_length"]), int(hp["block_count"])
    n_head, n_kv = int(hp["attention.head_count"]), int(hp["attention.head_count_kv"])
    eps, theta = float(hp["attention.layer_norm_rms_epsilon"]), float(hp["rope.freq_base"])
    d = n_embd // n_head
    neox = arch in ("qwen2", "qwen3")
    n = len(ids)
    pos = np.arange(n, dtype=np.float64)
    x = w["token_embd.weight"][ids]
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q, k, v = mm(h, p + "attn_q.weight"), mm(h, p + "attn_k.weight"), mm(h, p + "attn_v.weight")
        if p + "attn_q.bias" in w:
            q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
        q, k, v = q.reshape(n, n_head, d), k.reshape(n, n_kv, d), v.reshape(n, n_kv, d)
        if p + "attn_q_norm.weight" in w:
            q, k = rms_norm(q, w[p + "attn_q_norm.weight"], eps), rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        q, k = rope(q, pos, theta, neox), rope(k, pos, theta, neox)
        if f16_kv:
            k, v = round_f16(k), round_f16(v)
        out = np.zeros((n, n_head, d))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            qh = round_f16(q[:, hh, :]) if types is not None else q[:, hh, :]
            s = qh @ k[:, kv, :].T / np.sqrt(d)
            s = s + np.triu(np.full((n, n), -np.inf), 1)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, hh, :] = (round_f16(s) if types is not None else s) @ v[:, kv, :]
        x = x + mm(out.reshape(n, n_embd), p + "attn_output.weight")
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        g, u = mm(h, p + "ffn_gate.weight"), mm(h, p + "ffn_up.weight")
        x = x + mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight")
    x = rms_norm(x, w["output_norm.weight"], eps)
    return mm(x, "output.weight" if "output.weight" in w else "token_embd.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                                                     "golden", "oracle"))
    ap.add_argument("--dump", help="write <arch>-<type>.npy reference logits (F16 KV) here")
    args = ap.parse_args()
    tierserve = os.path.join(args.build_dir, "bin", "tierserve")
    work = os.path.join(args.build_dir, "oracle-models")
    os.makedirs(work, exist_ok=True)
    print(f"max |reference - llama.cpp| over all logits: exact float64 with F16 K/V, exact with F32 K/V, and "
          f"emulating llama.cpp's activation rounding")
    print(f"{'model':12} {'exact':>9} {'f32 KV':>9} {'emulated':>9}")
    for gpath in sorted(glob.glob(os.path.join(args.golden, "*.json"))):
        if os.path.basename(gpath).startswith("vocab-"):
            continue
        g = json.load(open(gpath))
        m = g["model"]
        path = os.path.join(work, f"ref-{m['arch']}-{m['type']}.gguf")
        subprocess.run([tierserve] + m["make_model_args"] + ["-o", path], check=True, capture_output=True)
        arch, hp, w, types = load(path)
        ref = np.stack([np.frombuffer(base64.b64decode(s), dtype="<f4") for s in g["logits"]]).astype(np.float64)
        ours16 = forward(arch, hp, w, g["prompt_ids"], f16_kv=True)
        ours32 = forward(arch, hp, w, g["prompt_ids"], f16_kv=False)
        emul = forward(arch, hp, w, g["prompt_ids"], f16_kv=True, types=types)
        print(f"{m['arch'] + ' ' + m['type']:12} {np.abs(ours16 - ref).max():9.5f} "
              f"{np.abs(ours32 - ref).max():9.5f} {np.abs(emul - ref).max():9.5f}", flush=True)
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            np.save(os.path.join(args.dump, f"{m['arch']}-{m['type']}.npy"), ours16.astype(np.float32))
        os.remove(path)


if __name__ == "__main__":
    main()
