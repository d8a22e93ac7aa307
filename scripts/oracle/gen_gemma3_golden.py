#!/usr/bin/env python3
"""Regenerates the llama.cpp goldens of tests/gemma3_golden_test.cc.

Runs the default model (Gemma 3 270M Q4_K_M, installed by scripts/setup-model.sh) through
llama.cpp via the pinned llama-cpp-python, greedy, on a fixed set of plain and chat
prompts, and writes tests/data/golden/gemma3/<name>.json per prompt with:
  - prompt_ids: llama.cpp's tokenization (BOS added, special tokens parsed), which our
    tokenizer must reproduce;
  - tokens: the greedy continuation (argmax, lowest id on ties), stopping early at an
    end-of-generation token, and its text;
  - steps: per generated token, llama.cpp's top-5 ids with their logits and logprobs
    (log-softmax over the whole vocabulary, in float64) and the gap between the two best
    logits (how close that step was to a tie).

The prompt is evaluated in one batch (n_batch = 512, so a longer prompt goes in chunks of
512, as our engine does), then one token per decode call, with only the last row's logits
requested (logits_all = False: the ordinary generation path).

    .venv/bin/python scripts/oracle/gen_gemma3_golden.py            # regenerate
    .venv/bin/python scripts/oracle/gen_gemma3_golden.py --check    # compare, write nothing

Unless --no-cross-check, it also reruns llama.cpp with the other flash-attention setting
and with the prompt evaluated token by token (n_batch = 1) and records, per prompt, the
steps at which those pick another greedy token when fed the golden's tokens
("llama_cpp_variant_flips") and for how many steps all of them agree
("llama_cpp_variants_agree_steps"). Gemma 3 270M's greedy path has many near-ties (top-2
gaps of 0.01..0.3 logits are common) and llama.cpp's own configurations flip some of them;
tests/gemma3_golden_test.cc uses these measurements.
"""
import argparse
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

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
N_THREADS = 2
N_CTX = 1024
N_BATCH = 512
FLASH_ATTN = True   # llama.cpp's own default on CPU ("auto" enables it); our kernels follow it
TOP_K = 5


def chat(msg):
    """Gemma's chat format for one user turn and the generation prompt (BOS comes from
    the tokenizer)."""
    return f"<start_of_turn>user\n{msg}<end_of_turn>\n<start_of_turn>model\n"


# name, kind, text, tokens to generate (an end-of-generation token may stop it earlier).
# Gemma 3 270M is a base model: its "answers" to chat prompts are mostly echoes, but they
# are what llama.cpp produces and exercise the chat special tokens.
PROMPTS = [
    ("capital_plain", "plain", "The capital of France is", 48),
    ("quick_fox", "plain", "The quick brown fox", 48),
    ("water_boils", "plain", "Water boils at", 40),
    ("weekdays", "plain", "Monday, Tuesday, Wednesday,", 40),
    ("alphabet", "plain", "The alphabet: A, B, C, D,", 40),
    ("qa_math", "plain", "Q: What is 2 + 2?\nA:", 32),
    ("code_fib", "plain", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n', 48),
    ("code_imports", "plain", "import numpy as np\nimport", 48),
    ("once_upon", "plain", "Once upon a time", 48),
    ("chat_capital", "chat", chat("What is the capital of France?"), 48),
    ("chat_python", "chat", chat("Write a Python function that adds two numbers."), 48),
    ("chat_hello", "chat", chat("Hello!"), 32),
    ("chat_days", "chat", chat("List the days of the week."), 48),
    ("chat_story", "chat", chat("Tell me a short story about a robot who learns to paint."), 64),
    # Longer than the sliding window (512): local layers see only the last 512 positions.
    ("long_count", "plain", "Numbers: " + ", ".join(str(i) for i in range(1, 181)) + ",", 32),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_revision(repo):
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load(path, n_threads, flash_attn, n_batch=N_BATCH):
    return Llama(model_path=path, n_ctx=N_CTX, n_batch=n_batch, n_ubatch=n_batch, n_threads=n_threads,
                 n_threads_batch=n_threads, logits_all=False, flash_attn=flash_attn, verbose=False, seed=0)


def last_logits(m):
    p = llama_cpp.llama_get_logits_ith(m._ctx.ctx, -1)
    return np.ctypeslib.as_array(p, shape=(m.n_vocab(),)).copy()


def is_eog(m, tok):
    return bool(llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(m._model.model), tok))


def greedy(m, prompt_ids, n_predict):
    """Greedy decode; returns (tokens, steps, stop_reason)."""
    m.reset()
    m.eval(prompt_ids)
    tokens, steps = [], []
    stop = "length"
    for _ in range(n_predict):
        lg = last_logits(m).astype(np.float32)
        assert np.isfinite(lg).all()
        tok = int(np.argmax(lg))  # first maximum: lowest id on ties
        lg64 = lg.astype(np.float64)
        mx = lg64.max()
        lse = mx + np.log(np.exp(lg64 - mx).sum())
        top = np.argsort(-lg, kind="stable")[:TOP_K]
        steps.append({
            "top_ids": [int(i) for i in top],
            "top_logits": [float(lg[i]) for i in top],
            "top_logprobs": [round(float(lg64[i] - lse), 6) for i in top],
            "gap": round(float(lg[top[0]] - lg[top[1]]), 6),
        })
        if is_eog(m, tok):
            stop = "eog"
            steps[-1]["eog"] = tok
            break
        tokens.append(tok)
        m.eval([tok])
    return tokens, steps, stop


def variant_flips(m, prompt_ids, tokens, steps):
    """Steps at which `m` (another llama.cpp configuration) picks another greedy token than
    the golden, evaluated on the golden's tokens (teacher forcing)."""
    m.reset()
    m.eval(prompt_ids)
    flips = []
    for s, st in enumerate(steps):
        tok = int(np.argmax(last_logits(m)))
        want = st.get("eog", tokens[s] if s < len(tokens) else -1)
        if tok != want:
            flips.append(s)
        if s < len(tokens):
            m.eval([tokens[s]])
    return flips


def main():
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    default_model = os.path.join(os.environ.get("TIERSERVE_MODEL_DIR",
                                                os.path.expanduser("~/.cache/tierserve/models")), MODEL_FILE)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=default_model)
    ap.add_argument("--out", default=os.path.join(repo, "tests", "data", "golden", "gemma3"))
    ap.add_argument("--check", action="store_true", help="compare llama.cpp with the stored goldens, write nothing")
    ap.add_argument("--no-cross-check", action="store_true",
                    help="skip the runs of llama.cpp's other configurations (faster; the goldens then "
                         "lack llama_cpp_variant_flips, and the test treats every step as strict)")
    ap.add_argument("--only", default="", help="comma-separated prompt names")
    args = ap.parse_args()

    if not os.path.isfile(args.model):
        sys.exit(f"gen_gemma3_golden: {args.model} not found; run scripts/setup-model.sh")
    digest = sha256(args.model)
    if digest != MODEL_SHA256:
        sys.exit(f"gen_gemma3_golden: {args.model} has SHA-256 {digest}, expected {MODEL_SHA256}")

    common = {
        "format": "tierserve-gemma3-golden/1",
        "generator": "scripts/oracle/gen_gemma3_golden.py",
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tierserve_revision": git_revision(repo),
        "model": {"file": MODEL_FILE, "bytes": os.path.getsize(args.model), "sha256": digest},
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_settings": {
            "n_threads": N_THREADS, "n_ctx": N_CTX, "n_batch": N_BATCH, "n_ubatch": N_BATCH,
            "logits_all": False, "flash_attn": FLASH_ATTN, "type_k": "f16", "type_v": "f16",
            "swa_full": "llama-cpp-python default (full-size SWA cache)",
            "sampling": "greedy: argmax of the last row's logits, lowest id on ties",
            "tokenize": "add_bos=True, special=True",
        },
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "machine": platform.machine(),
    }
    m = load(args.model, N_THREADS, FLASH_ATTN)
    others = []
    if not args.no_cross_check:
        others = [("flash_attn=%s" % (not FLASH_ATTN), load(args.model, N_THREADS, not FLASH_ATTN)),
                  ("n_batch=1", load(args.model, N_THREADS, FLASH_ATTN, n_batch=1))]
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    failures = 0
    min_gap = None
    for name, kind, text, n_predict in PROMPTS:
        if only and name not in only:
            continue
        ids = m.tokenize(text.encode(), add_bos=True, special=True)
        tokens, steps, stop = greedy(m, ids, n_predict)
        gap = min(s["gap"] for s in steps)
        min_gap = gap if min_gap is None else min(min_gap, gap)
        golden = dict(common)
        golden.update({
            "name": name, "kind": kind, "prompt_text": text, "prompt_ids": [int(i) for i in ids],
            "n_predict": n_predict, "tokens": tokens,
            "text": m.detokenize(tokens).decode("utf-8", errors="replace"),
            "stop_reason": stop, "min_gap": gap, "steps": steps,
        })
        if others:
            # Where llama.cpp's own variants pick another token, fed the golden's tokens:
            # there its greedy choice depends on its rounding, not on the model.
            flips = {label: variant_flips(other, ids, tokens, steps) for label, other in others}
            golden["llama_cpp_variant_flips"] = flips
            golden["llama_cpp_variants_agree_steps"] = min([len(steps)] + [f[0] for f in flips.values() if f])
        self_check = golden.get("llama_cpp_variant_flips", {})
        path = os.path.join(args.out, f"{name}.json")
        status = ""
        if args.check:
            with open(path) as f:
                old = json.load(f)
            same = old["prompt_ids"] == golden["prompt_ids"] and old["tokens"] == golden["tokens"]
            status = "matches the stored golden" if same else "DIFFERS from the stored golden"
            failures += 0 if same else 1
        else:
            with open(path, "w") as f:
                json.dump(golden, f, indent=1, ensure_ascii=False)
                f.write("\n")
            status = f"-> {os.path.relpath(path)}"
        print(f"  {name:14} {len(ids):4} prompt + {len(tokens):2} tokens ({stop}), min gap {gap:.4f} "
              f"{self_check if self_check else ''} {status}", flush=True)
        print(f"      {golden['text'][:100]!r}", flush=True)
    print(f"gen_gemma3_golden: llama-cpp-python {llama_cpp.__version__}, min top-2 gap over all steps {min_gap:.4f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
