#!/usr/bin/env bash
# Speculative decoding (prompt lookup) A/B on one server binary: the same ultrafast
# workload against `tierserve serve` with `speculative.max_drafts` 4 (the default) and 0
# (off), alternating ROUNDS times; closed loop, one request in flight, so TPOT is the
# engine's decode speed for one sequence. Workloads: bench/workloads/copy.jsonl (the model
# repeats a given text: drafts match) greedy ("copy-t0") and at the server's default
# temperature 1 ("copy-t1"), and synthetic chat at temperature 1 ("free-t1": free text,
# drafts exist only where the model repeats itself). Prints a markdown table; raw JSON
# per cell in OUT_DIR.
#
# Environment: TIERSERVE_BIN [build/bin/tierserve], TIERSERVE_MODEL [default model],
#   THREADS [2], N [24] requests per cell, ROUNDS [2], OUT_DIR [build/bench-results/spec-<UTC>]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
MODEL=${TIERSERVE_MODEL:-$HOME/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
N=${N:-16}
ROUNDS=${ROUNDS:-2}
OUT_DIR=${OUT_DIR:-$ROOT/build/bench-results/spec-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT_DIR"
[ -x "$BIN" ] || { echo "speculative.sh: no $BIN (build first)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "speculative.sh: no model $MODEL (bash scripts/setup-model.sh)" >&2; exit 1; }

SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; true; }
trap cleanup EXIT

cell() {  # cell NAME DRAFTS WORKLOAD_ARGS...
  local name=$1 drafts=$2; shift 2
  local port="$OUT_DIR/$name.port" cfg="$OUT_DIR/$name.yaml"
  printf 'speculative: {max_drafts: %s}\n' "$drafts" > "$cfg"
  rm -f "$port"
  "$BIN" serve -c "$cfg" -m "$MODEL" -t "$THREADS" -p 0 --port-file "$port" > "$OUT_DIR/$name.serve.log" 2>&1 &
  SPID=$!
  for _ in $(seq 300); do [ -s "$port" ] && break; sleep 0.1; done
  [ -s "$port" ] || { echo "server did not start: $OUT_DIR/$name.serve.log" >&2; exit 1; }
  local url="http://127.0.0.1:$(cat "$port")"
  "$BIN" bench --url "$url" --mode closed -c 1 --warmup 2 -n "$N" --seed 7 -q "$@" \
      --json "$OUT_DIR/$name.json" > "$OUT_DIR/$name.bench.txt" 2>&1
  curl -s "$url/admin/stats" > "$OUT_DIR/$name.stats.json"
  kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  echo "[$(date -u +%H:%M:%S)] $name done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
}

for r in $(seq "$ROUNDS"); do
  for drafts in 4 0; do
    cell "copy-t0-d$drafts-r$r" "$drafts" --workload "$ROOT/bench/workloads/copy.jsonl" --temperature 0
    cell "copy-t1-d$drafts-r$r" "$drafts" --workload "$ROOT/bench/workloads/copy.jsonl"
    cell "free-t1-d$drafts-r$r" "$drafts" --tier-mix ultrafast=1 --input-len 32 --output-len 96
  done
done

python3 - "$OUT_DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def get(name):
    j = json.load(open(f"{out}/{name}.json"))
    st = json.load(open(f"{out}/{name}.stats.json"))
    o = j["steady"]["overall"]
    return o["tpot_ms"]["p50"], o["ttft_ms"]["p50"], o["output_tok_s"], st["speculative"]
print("| workload | max_drafts | TPOT P50 ms (per round) | median | TTFT P50 ms | output tok/s | drafts accepted / drafted |")
print("|---|---|---|---|---|---|---|")
for w in ("copy-t0", "copy-t1", "free-t1"):
    for d in (4, 0):
        rows = [get(f"{w}-d{d}-r{r}") for r in range(1, rounds + 1)]
        tp = [x[0] for x in rows]
        acc = sum(x[3]["accepted"] for x in rows); dr = sum(x[3]["drafted"] for x in rows)
        print(f"| {w} | {d} | {' / '.join(f'{v:.1f}' for v in tp)} | {statistics.median(tp):.1f} | {statistics.median(x[1] for x in rows):.0f} | {statistics.median(x[2] for x in rows):.1f} | {acc} / {dr} |")
PY
echo "raw: $OUT_DIR" >&2
