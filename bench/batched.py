#!/usr/bin/env python3
"""Batched decoding side by side (issue 4; bench/batched.sh runs this).

For each model, the peers' `llama-batched-bench` (llama.cpp: build/peer/gcc; ik_llama.cpp:
build/peer/ik, with run-time repack -rtr; its flash attention aborts with two or more
sequences in the pinned version, so -fa 0) and
`tierserve batched-bench` with the same arguments (-npp 128 -ntg 128, -t THREADS):
  1. one pass of each over -npl 1,2,4,8,16;
  2. REPS alternating passes of each at -npl 16 (the target's cell), medians.
Prints a markdown table of S_PP and S_TG (aggregate tokens/s) with tierserve's ratio to
each peer, writes the raw outputs and the table under OUT. The peers get a context of 8192
cells (-c), -b 2048 -ub 512 (their defaults); llama.cpp's flash attention is on its
default (auto).
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare import loadavg, log, make_model, read_bandwidth  # noqa: E402


def rows_of(text):
    """(B, S_PP, S_TG) of every result row of a batched-bench table (either tool)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit() and cells[2].isdigit():
            out.append((int(cells[2]), float(cells[5]), float(cells[7])))
    return out


def run(cmd, raw, tag):
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(raw, "a") as f:
        f.write(f"### {tag}: {' '.join(cmd)}\n{p.stdout}\n{p.stderr[-2000:] if p.returncode else ''}\n")
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    rows = rows_of(p.stdout) or rows_of(p.stderr)  # ik_llama.cpp prints its table to stderr
    if not rows:
        raise RuntimeError(f"no result rows from {' '.join(cmd)}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierserve", default=os.path.join(ROOT, "build", "bin", "tierserve"))
    ap.add_argument("--peer-dir", default=os.path.join(ROOT, "build", "peer"))
    ap.add_argument("--peers", default="gcc,ik", help="peer builds of bench/peer.sh (gcc: llama.cpp, ik: ik_llama.cpp)")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--models", default="llama:110m:q8_0,file:" +
                    os.path.expanduser("~/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf"),
                    help="arch:shape:type (a make-model model) or file:PATH, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--npl", default="1,2,4,8,16")
    ap.add_argument("--isa", default="native", choices=["native", "avx2"],
                    help="avx2: the peers' AVX2 builds (bench/peer.sh --isa avx2, build/peer/<peer>-avx2) "
                         "against TIERSERVE_ISA=avx2")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results",
                                                  "bb-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.models_dir, exist_ok=True)
    raw = os.path.join(args.out, "raw.txt")
    peers = [p for p in args.peers.split(",") if p]
    names = {"ik": "ik_llama.cpp"}
    suffix = "" if args.isa == "native" else "-" + args.isa
    if args.isa != "native":
        os.environ["TIERSERVE_ISA"] = args.isa  # tierserve's runs inherit it
    for p in peers:
        if not os.access(os.path.join(args.peer_dir, p + suffix, "bin", "llama-batched-bench"), os.X_OK):
            sys.exit(f"batched: no {args.peer_dir}/{p + suffix}/bin/llama-batched-bench: run bench/peer.sh"
                     + (f" --isa {args.isa}" if suffix else "") + " first")
    bw_start = read_bandwidth()
    common = ["-npp", "128", "-ntg", "128", "-t", str(args.threads)]
    engines = [names.get(p, "llama.cpp") for p in peers] + ["tierserve"]
    head = ["model", "sequences"] + [f"{e} S_PP" for e in engines] + [f"S_PP / {e}" for e in engines[:-1]] + \
           [f"{e} S_TG" for e in engines] + [f"S_TG / {e}" for e in engines[:-1]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(name, label, by_engine, bold=False):
        ours = by_engine["tierserve"]
        cells = [name, label]
        for k in (0, 1):  # S_PP, S_TG
            cells += [f"{by_engine[e][k]:.1f}" for e in engines]
            ratios = [f"{ours[k] / by_engine[e][k]:.2f}x" for e in engines[:-1]]
            cells += [f"**{r}**" if bold and k == 1 else r for r in ratios]
        lines.append("| " + " | ".join(cells) + " |")

    for spec in args.models.split(","):
        if spec.startswith("file:"):
            path = spec[5:]
            name = os.path.basename(path)
        else:
            arch, shape, typ = spec.split(":")
            path = make_model(args.tierserve, args.models_dir, arch, shape, typ)
            name = f"{shape} {typ}"
        cmds = {}
        for p, e in zip(peers, engines):
            # ik_llama.cpp's flash attention aborts with two or more sequences of their own
            # (ik-llama-cpp-python 0.1.5: GGML_ASSERT(S > 0), ggml/src/iqk/fa/iqk_fa_templates.h
            # line 1157; one shared prompt, -pps, runs), so its batched runs go without it.
            extra = ["-rtr", "-fa", "0"] if p == "ik" else []
            cmds[e] = [os.path.join(args.peer_dir, p + suffix, "bin", "llama-batched-bench"), "-m", path, "-c", "8192",
                       "-b", "2048", "-ub", "512"] + extra + common
        cmds["tierserve"] = [args.tierserve, "batched-bench", "-m", path] + common
        log(f"{name}: -npl {args.npl}")
        sweep = {e: run(cmds[e] + ["-npl", args.npl], raw, e) for e in engines}
        for i, (b, _, _) in enumerate(sweep["tierserve"]):
            row(name, str(b), {e: sweep[e][i][1:] for e in engines})
        samples = {e: [] for e in engines}
        for r in range(args.reps):
            log(f"{name}: -npl 16, pass {r + 1} of {args.reps} (load {loadavg()})")
            for e in engines:
                samples[e].append(run(cmds[e] + ["-npl", "16"], raw, e)[0])
        med = {e: (statistics.median(x[1] for x in v), statistics.median(x[2] for x in v)) for e, v in samples.items()}
        row(name, f"16 (median of {args.reps})", med, bold=True)
        tg = "; ".join(f"{e} " + "/".join(f"{x[2]:.0f}" for x in samples[e]) for e in engines)
        lines.append(f"|  | (S_TG per pass: {tg}) |" + " |" * (len(head) - 2))
    lines.append("")
    lines.append(f"{args.threads} threads, -npp 128 -ntg 128" + (f"; every engine on its {args.isa} code" if suffix else "") + ("; ik_llama.cpp -rtr -fa 0 (its -fa 1 aborts with 2+ sequences)" if "ik" in peers else "") +
                 f"; load average at the end: {loadavg()}; read bandwidth (kernels_bench roofline/read) at the "
                 f"start: {bw_start}, at the end: {read_bandwidth()}.")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    log(f"raw outputs in {args.out}")


if __name__ == "__main__":
    main()
