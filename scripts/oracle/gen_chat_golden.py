#!/usr/bin/env python3
"""Regenerates tests/data/golden/smollm2/chat.json: llama.cpp's rendering of SmolLM2 135M
Instruct's own chat template (its Jinja, run by llama-server's template engine) and its
tokenization of that prompt, for a set of conversations; tests/chat_golden_test.cc checks
that tierserve's chat template and tokenizer produce the same text and the same tokens.

llama-server is the pinned peer built by `bash bench/peer.sh --server-only` (llama.cpp
vendored in the llama-cpp-python sdist). The script starts it on the model with --jinja,
asks POST /apply-template for each conversation's prompt and POST /tokenize for its tokens
(special tokens added and parsed, as the server does for a chat), and writes the file.

    .venv/bin/python scripts/oracle/gen_chat_golden.py            # regenerate
    .venv/bin/python scripts/oracle/gen_chat_golden.py --check    # compare, write nothing
"""
import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
OUT = os.path.join(ROOT, "tests", "data", "golden", "smollm2", "chat.json")

# Conversations: without a system message (the template's default system prompt applies),
# with one, several turns, contents with newlines, spaces and special-looking text.
CASES = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}]),
    ("with_system", [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "What is the capital of France?"}]),
    ("multi_turn", [{"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello! How can I help you today?"},
                    {"role": "user", "content": "Tell me a joke about cats."}]),
    ("system_multi_turn", [{"role": "system", "content": "Answer in one word."},
                           {"role": "user", "content": "Colour of the sky?"},
                           {"role": "assistant", "content": "Blue."},
                           {"role": "user", "content": "And grass?"}]),
    ("newlines_and_spaces", [{"role": "user", "content": "  Line one\nLine two\n\n  indented  "}]),
    ("code", [{"role": "user", "content": "Write a Python function:\n```python\ndef add(a, b):\n    return a + b\n```"}]),
    ("unicode", [{"role": "user", "content": "Translate: café, naïve, 東京, emoji 🙂"}]),
    ("empty_user", [{"role": "user", "content": ""}]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def generate(server, model):
    port = free_port()
    proc = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port", str(port), "--jinja", "-t", "1",
                             "-c", "2048", "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                sys.exit("gen_chat_golden: llama-server did not start:\n" + proc.stderr.read().decode(errors="replace"))
            time.sleep(0.1)
        cases = []
        for name, messages in CASES:
            prompt = post(port, "/apply-template", {"messages": messages})["prompt"]
            tokens = post(port, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
            cases.append({"name": name, "messages": messages, "prompt": prompt, "tokens": tokens})
        return cases
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(os.environ.get("TIERSERVE_MODEL_DIR",
                    os.path.expanduser("~/.cache/tierserve/models")), MODEL_FILE))
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "peer", "gcc", "bin", "llama-server"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"gen_chat_golden: {args.model} not found; run scripts/setup-model.sh")
    if sha256(args.model) != MODEL_SHA256:
        sys.exit(f"gen_chat_golden: {args.model} is not the pinned SmolLM2 file")
    if not os.path.exists(args.server):
        sys.exit(f"gen_chat_golden: {args.server} not found; run bash bench/peer.sh --server-only")
    out = {
        "model": MODEL_FILE,
        "model_sha256": MODEL_SHA256,
        "oracle": "llama-server --jinja (llama.cpp vendored in llama-cpp-python, bench/peer.sh): "
                  "POST /apply-template, then POST /tokenize with add_special and parse_special",
        "cases": generate(args.server, args.model),
    }
    text = json.dumps(out, indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = os.path.exists(OUT) and open(OUT, encoding="utf-8").read() == text
        print("up to date" if same else f"{OUT} differs from llama.cpp's rendering")
        sys.exit(0 if same else 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT} ({len(out['cases'])} conversations)")


if __name__ == "__main__":
    main()
