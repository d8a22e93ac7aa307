#!/usr/bin/env python3
"""Checks that `tierserve make-model` picks the same tensor type for every tensor as
llama.cpp's own quantizer (llama_model_quantize from the pinned llama-cpp-python).

For each arch/shape given, it writes an F16 model with make-model, quantizes it with
llama.cpp to each mix (and, with `pure`, to each plain type), writes the same model with
make-model directly, and compares the tensor types name by name. Exit status 1 on any
difference.

    .venv/bin/python scripts/oracle/check_type_mix.py --tierserve build/bin/tierserve \
        --work build/oracle-mix llama:15m qwen2:0.5b qwen3:tiny
"""
import argparse
import ctypes
import os
import subprocess
import sys

import llama_cpp
from gguf import GGUFReader

# make-model --type -> (llama_ftype, pure)
TYPES = {
    "q4_k_m": (15, False), "q5_k_m": (17, False),
    "q4_k": (14, True), "q5_k": (16, True), "q6_k": (18, True),
    "q8_0": (7, True), "q4_0": (2, True), "q5_1": (9, True),
}


def tensor_types(path):
    return {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierserve", required=True, help="the tierserve binary")
    ap.add_argument("--work", required=True, help="folder for the models (created)")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated make-model types")
    ap.add_argument("models", nargs="+", help="arch:shape, e.g. qwen2:0.5b")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    failures = 0
    for spec in args.models:
        arch, shape = spec.split(":")
        src = os.path.join(args.work, f"{arch}-{shape}-f16.gguf")
        subprocess.run([args.tierserve, "make-model", "--arch", arch, "--shape", shape, "--type", "f16",
                        "-o", src], check=True, capture_output=True)
        for t in args.types.split(","):
            ftype, pure = TYPES[t]
            ours = os.path.join(args.work, f"{arch}-{shape}-{t}.gguf")
            theirs = ours + ".llama-quantize.gguf"
            subprocess.run([args.tierserve, "make-model", "--arch", arch, "--shape", shape, "--type", t,
                            "-o", ours], check=True, capture_output=True)
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype, p.pure, p.nthread = ftype, pure, 2
            if llama_cpp.llama_model_quantize(src.encode(), theirs.encode(), ctypes.byref(p)) != 0:
                print(f"{spec} {t}: llama_model_quantize failed")
                failures += 1
                continue
            a, b = tensor_types(ours), tensor_types(theirs)
            diff = [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            counts = {}
            for v in a.values():
                counts[v] = counts.get(v, 0) + 1
            print(f"{spec:12} {t:7} {'OK ' if not diff else 'DIFF'} {len(a)} tensors {counts}"
                  + (f" differences: {diff[:8]}" if diff else ""))
            failures += bool(diff)
            for f in (ours, theirs):
                os.remove(f)
        os.remove(src)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
