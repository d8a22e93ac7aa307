#!/usr/bin/env python3
"""Batched decoding side by side (issue 4; bench/batched.sh runs this).

For each model, `llama-batched-bench` (the peer, build/peer/gcc) and `tierserve
batched-bench` with the same arguments (-npp 128 -ntg 128, -t THREADS):
  1. one pass of each over -npl 1,2,4,8,16 (peer first);
  2. REPS alternating passes of each at -npl 16 (the target's cell), medians.
Prints a markdown table of S_PP and S_TG (aggregate tokens/s) with the ratios, writes the
raw outputs and the table under OUT. The peer gets a context of 8192 cells (-c), -b 2048
-ub 512 (its defaults), flash attention on its default (auto).
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
    rows = rows_of(p.stdout)
    if not rows:
        raise RuntimeError(f"no result rows from {' '.join(cmd)}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierserve", default=os.path.join(ROOT, "build", "bin", "tierserve"))
    ap.add_argument("--peer", default=os.path.join(ROOT, "build", "peer", "gcc", "bin", "llama-batched-bench"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--models", default="llama:110m:q8_0,file:" +
                    os.path.expanduser("~/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf"),
                    help="arch:shape:type (a make-model model) or file:PATH, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--npl", default="1,2,4,8,16")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results",
                                                  "bb-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.models_dir, exist_ok=True)
    raw = os.path.join(args.out, "raw.txt")
    bw_start = read_bandwidth()
    common = ["-npp", "128", "-ntg", "128", "-t", str(args.threads)]
    lines = ["| model | sequences | llama.cpp S_PP | tierserve S_PP | ratio | llama.cpp S_TG | tierserve S_TG | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for spec in args.models.split(","):
        if spec.startswith("file:"):
            path = spec[5:]
            name = os.path.basename(path)
        else:
            arch, shape, typ = spec.split(":")
            path = make_model(args.tierserve, args.models_dir, arch, shape, typ)
            name = f"{shape} {typ}"
        peer = [args.peer, "-m", path, "-c", "8192", "-b", "2048", "-ub", "512"] + common
        ours = [args.tierserve, "batched-bench", "-m", path] + common
        log(f"{name}: -npl {args.npl}")
        p_rows = run(peer + ["-npl", args.npl], raw, "peer")
        o_rows = run(ours + ["-npl", args.npl], raw, "tierserve")
        for (b, ppp, ptg), (_, opp, otg) in zip(p_rows, o_rows):
            lines.append(f"| {name} | {b} | {ppp:.1f} | {opp:.1f} | {opp / ppp:.2f}x | {ptg:.1f} | {otg:.1f} | "
                         f"{otg / ptg:.2f}x |")
        samples = {"peer": [], "ours": []}
        for r in range(args.reps):
            log(f"{name}: -npl 16, pass {r + 1} of {args.reps}")
            samples["peer"].append(run(peer + ["-npl", "16"], raw, "peer")[0])
            samples["ours"].append(run(ours + ["-npl", "16"], raw, "tierserve")[0])
        med = {k: (statistics.median(x[1] for x in v), statistics.median(x[2] for x in v)) for k, v in samples.items()}
        (ppp, ptg), (opp, otg) = med["peer"], med["ours"]
        lines.append(f"| {name} | 16 (median of {args.reps}) | {ppp:.1f} | {opp:.1f} | {opp / ppp:.2f}x | {ptg:.1f} | "
                     f"{otg:.1f} | **{otg / ptg:.2f}x** |")
        tg = ", ".join(f"{p[2]:.0f}/{o[2]:.0f}" for p, o in zip(samples["peer"], samples["ours"]))
        lines.append(f"|  | (S_TG per pass, peer/ours: {tg}) | | | | | | |")
    lines.append("")
    lines.append(f"{args.threads} threads, -npp 128 -ntg 128; load average at the end: {loadavg()}; read bandwidth "
                 f"(kernels_bench roofline/read) at the start: {bw_start}, at the end: {read_bandwidth()}.")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    log(f"raw outputs in {args.out}")


if __name__ == "__main__":
    main()
