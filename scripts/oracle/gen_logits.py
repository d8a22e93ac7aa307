#!/usr/bin/env python3
"""Regenerates the llama.cpp golden files of tests/oracle_logits_test.cc.

For each architecture (llama, qwen2, qwen3) and tensor type (f32 ... q6_k) it writes the
random-weight "tiny" model with `tierserve make-model` (deterministic: the test rebuilds
the same bytes), evaluates a fixed prompt with llama.cpp through the pinned
llama-cpp-python (all logits, fixed threads, F16 KV cache, no flash attention) and writes
tests/data/golden/oracle/<arch>-<type>.json with the logits of every position.

It also writes tokenizer goldens (tests/data/golden/oracle/vocab-<arch>-<shape>.json):
llama.cpp's token ids for a few texts on each generated vocabulary, which
tests/make_model_test.cc compares with our tokenizer.

    cmake --build build --target tierserve
    .venv/bin/python scripts/oracle/gen_logits.py --build-dir build

The golden files are small: the tiny model has a vocabulary of 1024, and the logits of
the 12 prompt positions are stored as base64 of little-endian float32 (exact).
"""
import argparse
import contextlib
import base64
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama
from gguf import GGUFReader

ARCHS = ["llama", "qwen2", "qwen3"]
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]
SHAPE = "tiny"
SEED = 1
N_THREADS = 2
N_CTX = 64
N_PROMPT = 12
PROMPT_TEXT = "Once upon a time there was a little girl named Mia who lived near the river."

# Tokenizer goldens: texts with words from the built-in text, words it never saw, digits,
# punctuation, newlines, non-ASCII and special-token text.
VOCAB_MODELS = [("llama", "tiny"), ("qwen2", "tiny"), ("llama", "15m"), ("qwen2", "15m")]
VOCAB_TEXTS = [
    "Once upon a time there was a little girl named Mia.",
    "Hello world",
    " leading space and  double  spaces",
    "Tom's tree house was painted blue & yellow; it took 4 days (and 1000 nails)!",
    "line one\nline two\n\nafter a blank line\ttab",
    "Zebras quickly jumped over xylophones",
    "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001F600",
    "<|im_start|>user\nhi<|im_end|>",
    "",
]



@contextlib.contextmanager
def quiet_stderr():
    """Silences llama.cpp's C-level logging (fd 2) for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

def find_tierserve(build_dir):
    for rel in ("bin/tierserve", "src/tools/tierserve", "tierserve"):
        p = os.path.join(build_dir, rel)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    sys.exit(f"gen_logits: no tierserve binary under {build_dir} (build the 'tierserve' target first)")


def fnv1a64(path):
    """FNV-1a 64 of the file, as the C++ test computes it (numpy-free, chunked)."""
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        data = f.read()
    # Pure Python is ~1 s per MiB; the tiny models are about 1-4 MiB.
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def git_revision(repo):
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def make_model(tierserve, arch, shape, typ, path):
    args = ["make-model", "--arch", arch, "--shape", shape, "--type", typ, "--seed", str(SEED), "-o", path]
    subprocess.run([tierserve] + args, check=True, capture_output=True)
    return args[:-2]  # without the output path


def load(path):
    return Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                 logits_all=True, flash_attn=False, verbose=False, seed=0)


def maker_version(path):
    r = GGUFReader(path)
    f = r.fields["tierserve.maker_version"]
    return int(f.parts[f.data[0]][0])


def gen_model_golden(tierserve, arch, typ, work, out_dir, common):
    path = os.path.join(work, f"{arch}-{SHAPE}-{typ}.gguf")
    args = make_model(tierserve, arch, SHAPE, typ, path)
    m = load(path)
    ids = m.tokenize(PROMPT_TEXT.encode(), add_bos=True, special=False)[:N_PROMPT]
    assert len(ids) == N_PROMPT, f"prompt too short: {len(ids)} tokens"
    m.reset()
    m.eval(ids)
    logits = np.array(m.scores[:N_PROMPT], dtype="<f4")
    assert logits.shape == (N_PROMPT, m.n_vocab()) and np.isfinite(logits).all()
    top2 = np.sort(logits, axis=1)[:, -2:]
    golden = dict(common)
    golden.update({
        "model": {
            "arch": arch, "shape": SHAPE, "type": typ, "seed": SEED,
            "make_model_args": args, "maker_version": maker_version(path),
            "file_bytes": os.path.getsize(path), "fnv1a64": fnv1a64(path),
        },
        "prompt_text": PROMPT_TEXT,
        "prompt_ids": [int(i) for i in ids],
        "n_vocab": int(m.n_vocab()),
        "logits_encoding": "one base64 string per position: n_vocab little-endian float32",
        "logits": [base64.b64encode(row.tobytes()).decode() for row in logits],
        # For reading the file, not used by the test (it recomputes them from the logits).
        "argmax": [int(i) for i in logits.argmax(axis=1)],
        "top2_gap": [round(float(g), 6) for g in (top2[:, 1] - top2[:, 0])],
        "logit_std": round(float(logits.std()), 4),
    })
    del m
    out = os.path.join(out_dir, f"{arch}-{typ}.json")
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    os.remove(path)
    print(f"  {arch:5} {typ:5} argmax {golden['argmax']} min gap {min(golden['top2_gap']):.4f} "
          f"-> {os.path.relpath(out)} ({os.path.getsize(out) // 1024} KiB)", flush=True)


def gen_vocab_golden(tierserve, arch, shape, work, out_dir, common):
    path = os.path.join(work, f"vocab-{arch}-{shape}.gguf")
    args = make_model(tierserve, arch, shape, "q8_0", path)
    with quiet_stderr():  # llama.cpp warns about the context of a vocab-only load
        m = Llama(model_path=path, n_ctx=16, vocab_only=True, verbose=False)
    cases = []
    for text in VOCAB_TEXTS:
        b = text.encode()
        ids = m.tokenize(b, add_bos=True, special=True)
        ids_plain = m.tokenize(b, add_bos=False, special=False)
        cases.append({"text": text, "ids_add_special_parse_special": [int(i) for i in ids],
                      "ids_plain": [int(i) for i in ids_plain]})
    golden = dict(common)
    golden.update({"model": {"arch": arch, "shape": shape, "make_model_args": args,
                             "maker_version": maker_version(path)},
                   "n_vocab": int(m.n_vocab()), "cases": cases})
    del m
    out = os.path.join(out_dir, f"vocab-{arch}-{shape}.json")
    with open(out, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.remove(path)
    print(f"  vocab {arch} {shape} -> {os.path.relpath(out)}", flush=True)


def main():
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True, help="CMake build folder holding the tierserve binary")
    ap.add_argument("--out", default=os.path.join(repo, "tests", "data", "golden", "oracle"))
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--no-vocab", action="store_true", help="skip the tokenizer goldens")
    args = ap.parse_args()

    tierserve = find_tierserve(args.build_dir)
    work = os.path.join(args.build_dir, "oracle-models")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    common = {
        "format": "tierserve-oracle/1",
        "generator": "scripts/oracle/gen_logits.py",
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tierserve_revision": git_revision(repo),
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_settings": {"n_threads": N_THREADS, "n_ctx": N_CTX, "n_batch": N_CTX, "logits_all": True,
                               "flash_attn": False, "type_k": "f16", "type_v": "f16"},
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "machine": platform.machine(),
    }
    print(f"oracle: llama-cpp-python {llama_cpp.__version__}, tierserve {common['tierserve_revision']}, "
          f"models in {work}", flush=True)
    for arch in args.archs.split(","):
        for typ in args.types.split(","):
            gen_model_golden(tierserve, arch, typ, work, args.out, common)
    if not args.no_vocab:
        for arch, shape in VOCAB_MODELS:
            if arch in args.archs.split(","):
                gen_vocab_golden(tierserve, arch, shape, work, args.out, common)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"oracle: {len(os.listdir(args.out))} files, {total / 1e6:.2f} MB in {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
