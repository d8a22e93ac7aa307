#!/usr/bin/env python3
"""Side-by-side benchmark of tierserve and the llama.cpp peer (bench/compare.sh runs this).

For each model (random weights from `tierserve make-model`, real shapes) and thread count:
  peer       llama-bench -p N_PROMPT -n N_GEN -d 0,DEPTH -r 1, REPS times (each peer build
             of bench/peer.sh: build/peer/gcc, build/peer/clang), median of the samples;
             ik_llama.cpp (build/peer/ik) with its best CPU settings, -rtr 1 -fa 1, and
             -gp DEPTH,N_GEN for decode at depth (its llama-bench has no -d)
  tierserve  `tierserve run --json --ignore-eos --temp 0`, one warm-up then REPS runs:
             a 1-token prompt + N_GEN tokens (decode at depth 0) and an N_PROMPT-token
             prompt + N_GEN tokens (prompt processing at depth 0, and decode after a
             prompt of N_PROMPT tokens, i.e. llama-bench's tg at depth N_PROMPT)
  --isa avx2 every engine on its AVX2 code: the peers' AVX2 builds (bench/peer.sh --isa avx2:
             build/peer/<peer>-avx2) and tierserve with TIERSERVE_ISA=avx2, so an AVX-512
             machine measures what an AVX2-only CPU runs
  baseline   with --baseline BIN: the same runs of a second tierserve build (e.g. the
             previous commit's), alternating with the first in ABBA order
the repetitions of the engines alternating, and prints a markdown table of medians
(tok/s), tierserve's ratio to the best llama.cpp build and to ik_llama.cpp, and
decode's achieved bandwidth (weight bytes x tok/s) against the peak tierserve measures.
Raw results go to OUT/results.jsonl, the table to OUT/table.md.
"""
import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Plain English, written for this benchmark; repeated to reach the prompt length.
PROMPT_TEXT = (
    "The village sat at the edge of a wide green valley, where a slow river bent around the "
    "hills. Every spring the farmers planted wheat and barley, and every autumn the children "
    "helped to carry the baskets home. In the evenings people gathered in the square to talk "
    "about the weather, the price of bread and the stories their grandparents used to tell. "
    "One year a traveller arrived with a cart full of books, and the whole village learned to "
    "read a little better that winter. ")

T0 = time.time()



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

def log(msg):
    print(f"[compare {time.time() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else None


def read_bandwidth():
    """The machine's read bandwidth now (kernels_bench roofline/read, 1 and 2 threads), as
    text for the table's note: it moves between ~20 and ~43 GB/s here, and decode follows."""
    kb = os.path.join(ROOT, "build", "bench", "kernels_bench")
    if not os.access(kb, os.X_OK):
        return "not measured (no build/bench/kernels_bench)"
    out = subprocess.run([kb, "--benchmark_filter=roofline/read", "--benchmark_format=json"], capture_output=True,
                         text=True).stdout
    try:
        runs = json.loads(out)["benchmarks"]
    except (ValueError, KeyError):
        return "not measured"
    return ", ".join(f"{r['name'].split('/')[2]} {r['bytes_per_second'] / 1e9:.1f} GB/s" for r in runs)


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def make_model(tierserve, models_dir, arch, shape, typ):
    path = os.path.join(models_dir, f"{arch}-{shape}-{typ}.gguf")
    if not os.path.exists(path):
        log(f"make-model {arch} {shape} {typ}")
        subprocess.run([tierserve, "make-model", "--arch", arch, "--shape", shape, "--type", typ, "-o", path],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def weight_bytes(path):
    """The weight bytes one decode step reads (tierserve's weight_bytes): every tensor, but of
    an embedding matrix that is not also the output projection only the token's row."""
    from gguf import GGUFReader
    tensors = GGUFReader(path).tensors
    total = sum(int(t.n_bytes) for t in tensors)
    if any(t.name == "output.weight" for t in tensors):
        embd = next(t for t in tensors if t.name == "token_embd.weight")
        n_rows = int(embd.shape[-1])  # gguf-py gives GGUF order: [n_embd, n_vocab]
        total -= int(embd.n_bytes) - int(embd.n_bytes) // n_rows
    return total


def kv_layers(path):
    """What a decode step reads of the KV per cached token: per layer (K + V bytes per token
    at F16, the cache type of all three engines; sliding window or None), from the GGUF."""
    from gguf import GGUFReader
    fields = GGUFReader(path).fields

    def val(key, default=None):
        f = fields.get(key)
        return default if f is None else f.contents()

    arch = val("general.architecture")
    n_layer = int(val(f"{arch}.block_count"))
    n_head = val(f"{arch}.attention.head_count")
    n_kv = val(f"{arch}.attention.head_count_kv", n_head)
    n_embd = int(val(f"{arch}.embedding_length"))
    per_layer = lambda x, i: int(x[i] if isinstance(x, list) else x)
    window = val(f"{arch}.attention.sliding_window")
    pattern = val(f"{arch}.attention.sliding_window_pattern", 6 if arch == "gemma3" else None)
    layers = []
    for i in range(n_layer):
        k_len = val(f"{arch}.attention.key_length")
        k_len = int(k_len) if k_len is not None else n_embd // per_layer(n_head, i)
        v_len = int(val(f"{arch}.attention.value_length", k_len))
        local = window is not None and (isinstance(pattern, list) and pattern[i] or
                                        isinstance(pattern, int) and (i + 1) % pattern != 0)
        layers.append((2 * per_layer(n_kv, i) * (k_len + v_len), int(window) if local else None))
    return layers


def kv_bytes(layers, depth, n_gen):
    """The KV bytes one decode step reads on average over n_gen steps after depth tokens."""
    ctx = depth + (n_gen + 1) / 2
    return sum(b * (min(ctx, w) if w else ctx) for b, w in layers)


def prompt_of_tokens(path, n_tokens, tierserve=None):
    """A text that llama.cpp's tokenizer (which ours matches) turns into exactly n_tokens
    tokens, BOS included when the vocabulary adds one; the closest below if not exact.
    Without llama-cpp-python in the venv, tierserve's own tokenizer counts."""
    try:
        from llama_cpp import Llama
        with quiet_stderr():  # llama.cpp warns about the context of a vocab-only load
            m = Llama(model_path=path, vocab_only=True, verbose=False)
        count = lambda s: len(m.tokenize(s.encode(), add_bos=True, special=False))
    except ImportError:
        def count(s):
            p = subprocess.run([tierserve, "run", "-m", path, "-p", s, "-n", "1", "--no-warmup", "--json", "-c", "8192"],
                               capture_output=True, text=True, check=True)
            return len(json.loads(p.stdout)["prompt_tokens"])
    words = (PROMPT_TEXT * (1 + 4 * n_tokens // len(PROMPT_TEXT.split()))).split()
    lo, hi = 0, len(words)
    while lo < hi:  # longest prefix of words with <= n_tokens tokens
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    text = " ".join(words[:lo])
    for filler in (" a", " the", ".", ",", " I"):
        while count(text + filler) <= n_tokens:
            text += filler
        if count(text) == n_tokens:
            break
    return text, count(text)


def peer_name(p):
    return "ik_llama.cpp" if p == "ik" else f"llama.cpp {p}"


def run_ik(peer_bin, model, threads, args, reps):
    # Run-time repacking (the interleaved _R8 layouts) and its flash attention: ik's best
    # CPU settings. -gp DEPTH,N_GEN times N_GEN tokens after a DEPTH-token prompt.
    cmd = [peer_bin, "-m", model, "-t", str(threads), "-p", str(args.n_prompt), "-n", str(args.n_gen),
           "-gp", f"{args.depth},{args.n_gen}", "-r", str(reps), "-fa", "1", "-rtr", "1", "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = []
    for r in json.loads(out[out.index("["):]):
        if r.get("n_gen", 0) and r.get("n_prompt", 0):  # a -gp test: decode at depth n_prompt
            test, depth = f"tg{r['n_gen']}", r["n_prompt"]
        elif r.get("n_prompt", 0):
            test, depth = f"pp{r['n_prompt']}", 0
        else:
            test, depth = f"tg{r['n_gen']}", 0
        results.append({"test": test, "depth": depth, "samples": r["samples_ts"], "median": median(r["samples_ts"]),
                        "flash_attn": "1", "rtr": 1})
    return results, " ".join(cmd)


def run_peer(peer_bin, model, threads, args, fa, reps):
    cmd = [peer_bin, "-m", model, "-t", str(threads), "-p", str(args.n_prompt), "-n", str(args.n_gen),
           "-d", f"0,{args.depth}", "-r", str(reps), "-fa", fa, "-o", "jsonl"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        results.append({"test": test, "depth": r.get("n_depth", 0), "samples": r["samples_ts"],
                        "median": median(r["samples_ts"]), "flash_attn": fa})
    return results, " ".join(cmd)


def run_tierserve(tierserve, model, threads, prompt, args):
    # n_gen + 1 tokens: n_gen decode passes (the first token comes from the prompt's pass), as
    # llama-bench's tg runs n_gen of them; gen_tok_s is passes per second.
    cmd = [tierserve, "run", "-m", model, "-p", prompt, "-n", str(args.n_gen + 1), "-t", str(threads),
           "--temp", "0", "--ignore-eos", "--json", "-c", str(args.n_prompt + args.n_gen + 64),
           "-b", str(args.n_prompt), "--fa", args.ts_fa,
           # llama-bench's warm-up runs the whole prompt once: the same here (faults in the
           # KV and sizes the buffers for the prompt's step).
           "--warmup-tokens", str(args.n_prompt)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tierserve run failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierserve", default=os.path.join(ROOT, "build", "bin", "tierserve"))
    ap.add_argument("--peer-dir", default=os.path.join(ROOT, "build", "peer"))
    ap.add_argument("--peers", default="gcc,clang,ik", help="peer builds of bench/peer.sh to run (ik: ik_llama.cpp)")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--models", default="llama:110m:q8_0,llama:110m:q4_k_m,qwen2:0.5b:q8_0,qwen2:0.5b:q4_k_m",
                    help="arch:shape:type (a make-model model) or file:PATH (an existing GGUF), comma-separated")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("--fa", default="auto", help="llama-bench -fa value (off, on, auto)")
    ap.add_argument("--ts-fa", default="on",
                    help="tierserve run --fa value: on (llama.cpp's flash-attention rounding, the default), off, tiled")
    ap.add_argument("--baseline", default="",
                    help="another tierserve binary (e.g. the previous commit's build) run alternating with "
                         "--tierserve and reported beside it with the ratio tierserve / baseline")
    ap.add_argument("--isa", default="native", choices=["native", "avx2"],
                    help="avx2: the peers' AVX2 builds (bench/peer.sh --isa avx2) against TIERSERVE_ISA=avx2")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-tierserve", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results",
                                                  datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.models_dir, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    peers = [] if args.skip_peer else [p for p in args.peers.split(",") if p]
    suffix = "" if args.isa == "native" else "-" + args.isa
    if args.isa != "native":
        os.environ["TIERSERVE_ISA"] = args.isa  # tierserve's runs inherit it
    for p in peers:
        if not os.access(os.path.join(args.peer_dir, p + suffix, "bin", "llama-bench"), os.X_OK):
            sys.exit(f"compare: no {args.peer_dir}/{p + suffix}/bin/llama-bench: run bench/peer.sh"
                     + (f" --isa {args.isa}" if suffix else "") + " first")
    if not os.access(args.tierserve, os.X_OK):
        sys.exit(f"compare: no tierserve binary at {args.tierserve}")

    bw_start = read_bandwidth()
    raw = open(os.path.join(args.out, "results.jsonl"), "w")
    rows = []  # (model label, threads, test, depth, {engine: median}, extra)
    peak = None
    for spec in args.models.split(","):
        if spec.startswith("file:"):  # an existing GGUF, e.g. file:~/.cache/tierserve/models/x.gguf
            model = os.path.expanduser(spec[len("file:"):])
            if not os.path.exists(model):
                sys.exit(f"compare: no model file {model}")
            label = os.path.basename(model).removesuffix(".gguf")
        else:
            arch, shape, typ = spec.split(":")
            model = make_model(args.tierserve, args.models_dir, arch, shape, typ)
            label = f"{shape} {typ}"
        wbytes = weight_bytes(model)
        kv = kv_layers(model)
        prompt = short = None
        if not args.skip_tierserve:
            prompt, n = prompt_of_tokens(model, args.n_prompt, args.tierserve)
            short = "Once"
            log(f"{label}: {n}-token prompt")
        for t in threads:
            # Repetitions alternate between the engines (one llama-bench repetition of each
            # peer build, then one tierserve run of each kind), so that the machine's drift
            # (its read bandwidth moves by a third within minutes) reaches both alike.
            samples = {}  # (test, depth) -> {engine: [tok/s]}
            builds = [] if args.skip_tierserve else [("tierserve", args.tierserve)]
            if args.baseline and not args.skip_tierserve:
                builds.append(("baseline", args.baseline))
            for _, binary in builds:  # warm-up: page cache, huge pages, CPU frequency
                run_tierserve(binary, model, t, short, args)
                run_tierserve(binary, model, t, prompt, args)
            for rep in range(1, args.reps + 1):
                for p in peers:
                    log(f"{label} t={t} rep {rep}: {peer_name(p)} (load {loadavg()})")
                    bench = os.path.join(args.peer_dir, p + suffix, "bin", "llama-bench")
                    out, cmd = run_ik(bench, model, t, args, 1) if p == "ik" else run_peer(bench, model, t, args, args.fa, 1)
                    for r in out:
                        samples.setdefault((r["test"], r["depth"]), {}).setdefault(peer_name(p), []).extend(r["samples"])
                        raw.write(json.dumps({"engine": peer_name(p).replace(" ", "-"), "model": label, "threads": t,
                                              "rep": rep, "cmd": cmd, **r}) + "\n")
                # The builds' order flips every repetition (ABBA), so neither always runs first.
                for engine, binary in (builds if rep % 2 else builds[::-1]):
                    log(f"{label} t={t} rep {rep}: {engine} (load {loadavg()})")
                    a = run_tierserve(binary, model, t, short, args)
                    b = run_tierserve(binary, model, t, prompt, args)
                    peak = a.get("peak_gb_s", peak)
                    for key, val in (((f"pp{args.n_prompt}", 0), b["prompt_tok_s"]), ((f"tg{args.n_gen}", 0), a["gen_tok_s"]),
                                     ((f"tg{args.n_gen}", args.depth), b["gen_tok_s"])):
                        samples.setdefault(key, {}).setdefault(engine, []).append(val)
                    raw.write(json.dumps({"engine": engine, "model": label, "threads": t, "rep": rep,
                                          "short": {k: a[k] for k in a if k not in ("text", "tokens")},
                                          "long": {k: b[k] for k in b if k not in ("text", "tokens", "prompt_tokens")},
                                          "n_prompt": len(b["prompt_tokens"])}) + "\n")
            res = {key: {e: median(v) for e, v in by_engine.items()} for key, by_engine in samples.items()}
            raw.flush()
            for (test, depth), v in sorted(res.items(), key=lambda kv: (kv[0][0][:2] != "pp", kv[0][1])):
                rows.append((label, t, test, depth, v, wbytes + (kv_bytes(kv, depth, args.n_gen) if depth else 0)))

    engines = [peer_name(p) for p in peers] + ([] if args.skip_tierserve else ["tierserve"])
    llama_peers = [peer_name(p) for p in peers if p != "ik"]
    has_ik = "ik" in peers
    if args.baseline and not args.skip_tierserve:
        engines.append("baseline")
    lines = []
    head = ["model", "threads", "test", "depth"] + [f"{e} tok/s" for e in engines]
    if llama_peers and not args.skip_tierserve:
        head.append("tierserve / llama.cpp")
    if has_ik and not args.skip_tierserve:
        head.append("tierserve / ik_llama.cpp")
    if "baseline" in engines:
        head.append("tierserve / baseline")
    head.append("decode GB/s" + (f" (% of {peak:.0f} GB/s peak)" if peak else ""))
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for label, t, test, depth, v, wbytes in rows:
        cells = [label, str(t), test, str(depth)] + [fmt(v.get(e)) for e in engines]
        best_llama = max([v[e] for e in llama_peers if v.get(e)], default=None)
        ts = v.get("tierserve")
        if llama_peers and not args.skip_tierserve:
            cells.append(f"{ts / best_llama:.2f}x" if ts and best_llama else "—")
        if has_ik and not args.skip_tierserve:
            ik = v.get("ik_llama.cpp")
            cells.append(f"{ts / ik:.2f}x" if ts and ik else "—")
        if "baseline" in engines:
            ts, base = v.get("tierserve"), v.get("baseline")
            cells.append(f"{ts / base:.3f}x" if ts and base else "—")
        if test.startswith("tg"):
            gbs = []
            for e in engines:
                if v.get(e):
                    g = wbytes * v[e] / 1e9
                    gbs.append(f"{'ik' if e == 'ik_llama.cpp' else e.split()[-1]} {g:.1f}" +
                               (f" ({100 * g / peak:.0f}%)" if peak else ""))
            cells.append(", ".join(gbs) or "—")
        else:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    isa_note = "" if args.isa == "native" else f"; every engine on its {args.isa} code (peers built --isa {args.isa}, TIERSERVE_ISA={args.isa})"
    note = (f"\nMedians of {args.reps} runs{isa_note}; llama-bench -fa {args.fa}" + ("; ik_llama.cpp -fa 1 -rtr 1" if has_ik else "") +
            f"; tierserve --fa {args.ts_fa}; decode GB/s counts the bytes a step reads: the weights (an untied "
            f"embedding: one row) and, at depth, the F16 KV of the cached tokens (on average over the run; a "
            f"sliding-window layer its window). Load average at the end: {loadavg()}. Read bandwidth "
            f"(kernels_bench roofline/read) at the start: {bw_start}; at the end: {read_bandwidth()}.\n")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n" + note)
    print(table)
    print(note)
    log(f"results in {args.out}")


if __name__ == "__main__":
    main()
