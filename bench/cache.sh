#!/usr/bin/env bash
# What the gateway's response cache buys (docs/BENCHMARKS.md, response cache): a replay of
# N deterministic requests (temperature 0) in which REPEAT_PCT percent repeat an earlier
# one, sent closed-loop (CONCURRENCY in flight) through a gateway in front of one
# `tierserve serve`, once with the cache off and once with it on, each on a fresh gateway,
# ROUNDS times alternating (off, on, off, on, ...): throughput and TTFT P50/P99 of each,
# medians over the rounds. The worker runs a random-weight model made by `tierserve
# make-model` (no download). Builds nothing.
#
# Usage: bench/cache.sh
# Environment: TIERSERVE_BIN [build/bin/tierserve]  N [600]  REPEAT_PCT [60]  CONCURRENCY [8]
#   ROUNDS [3]  MAX_TOKENS [32]  SHAPE [15m]  THREADS [1]  OUT_DIR [build/bench-results/cache-<UTC>]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
N=${N:-600}
REPEAT_PCT=${REPEAT_PCT:-60}
CONCURRENCY=${CONCURRENCY:-8}
ROUNDS=${ROUNDS:-3}
MAX_TOKENS=${MAX_TOKENS:-32}
SHAPE=${SHAPE:-15m}
THREADS=${THREADS:-1}
OUT_DIR=${OUT_DIR:-$ROOT/build/bench-results/cache-$(date -u +%Y%m%dT%H%M%SZ)}
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "cache.sh: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no tierserve binary at $BIN"
mkdir -p "$OUT_DIR"
MODEL=$OUT_DIR/llama${SHAPE}_q8_0.gguf
[ -f "$MODEL" ] || "$BIN" make-model --arch llama --shape "$SHAPE" --type q8_0 -o "$MODEL" > /dev/null

# The replay file: N requests, REPEAT_PCT% of them repeating an earlier one (uniformly among
# those seen so far), deterministic (seeded).
python3 - "$OUT_DIR/replay.jsonl" "$N" "$REPEAT_PCT" << 'EOF'
import json, random, sys
path, n, pct = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rng = random.Random(7)
seen, out = [], []
for i in range(n):
    if seen and rng.random() * 100 < pct:
        p = rng.choice(seen)
    else:
        p = f"Request {len(seen)}: once upon a time there was a"
        seen.append(p)
    out.append({"prompt": p, "temperature": 0, "max_tokens": 0})
with open(path, "w") as f:
    for o in out:
        f.write(json.dumps(o) + "\n")
print(f"{n} requests, {len(seen)} distinct ({100 * (n - len(seen)) / n:.1f}% repeats)", file=sys.stderr)
EOF
sed -i "s/\"max_tokens\": 0/\"max_tokens\": $MAX_TOKENS/" "$OUT_DIR/replay.jsonl"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
start_worker "$MODEL" "$THREADS" m

run() {  # NAME CACHE(yes|no)
  local name=$1 cache=$2
  {
    echo "workers:"
    echo "  - {name: worker, kind: tierserve, model: m, url: \"$WORKER\", max_inflight: 64}"
    echo "log: {access: false}"
    [ "$cache" = yes ] && echo "cache: {max_bytes: 67108864, ttl_ms: 600000}"
  } > "$OUT_DIR/$name.yaml"
  rm -f "$OUT_DIR/$name.port"
  "$BIN" gateway -c "$OUT_DIR/$name.yaml" -p 0 --port-file "$OUT_DIR/$name.port" --work-dir "$OUT_DIR/$name.d" \
    > "$OUT_DIR/$name.out" 2> "$OUT_DIR/$name.err" &
  local gpid=$!
  wait_port "$OUT_DIR/$name.port" "$gpid"
  local url
  url=http://127.0.0.1:$(head -1 "$OUT_DIR/$name.port")
  for _ in $(seq 1 100); do curl -s -f "$url/health/ready" > /dev/null && break; sleep 0.1; done
  "$BIN" bench --url "$url" --model m --workload "$OUT_DIR/replay.jsonl" --mode closed -c "$CONCURRENCY" -n "$N" \
    --no-cold-start -q --json "$OUT_DIR/$name.json" > "$OUT_DIR/$name.txt" 2> "$OUT_DIR/$name.bench.err" ||
    die "bench $name failed: $(tail -3 "$OUT_DIR/$name.bench.err")"
  curl -s "$url/metrics" | grep -E '^tierserve_gateway_cache_requests_total' > "$OUT_DIR/$name.cache.txt" || true
  kill "$gpid"
  wait "$gpid" || true
  log "$name: done"
}

log "worker $WORKER ($SHAPE q8_0, -t $THREADS); $N requests, closed loop at $CONCURRENCY, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  run "off$r" no
  run "on$r" yes
done

python3 - "$OUT_DIR" "$ROUNDS" << 'EOF' | tee "$OUT_DIR/table.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
info = {}
for l in open("/proc/cpuinfo"):
    if ":" in l:
        k, v = (x.strip() for x in l.split(":", 1))
        info.setdefault(k, v)
def stats(name):
    o = json.load(open(f"{out}/{name}.json"))["steady"]["overall"]
    return o["throughput_rps"], o["ttft_ms"]["p50"], o["ttft_ms"]["p99"], o["errors"]
def hits(name):
    try:
        t = open(f"{out}/{name}.cache.txt").read()
    except OSError:
        return ""
    v = {l.split('"')[1]: float(l.split()[-1]) for l in t.splitlines() if 'result="' in l}
    return f"{v.get('hit', 0):.0f} / {v.get('miss', 0):.0f}"
print(f"CPU: {info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')})\n")
print("| run | cache | req/s | TTFT P50 ms | TTFT P99 ms | errors | hits / misses |")
print("|---|---|---|---|---|---|---|")
med = {"off": [], "on": []}
for r in range(1, rounds + 1):
    for c in ("off", "on"):
        s = stats(f"{c}{r}")
        med[c].append(s)
        print(f"| {r} | {c} | {s[0]:.1f} | {s[1]:.2f} | {s[2]:.2f} | {s[3]} | {hits(f'{c}{r}')} |")
m = {c: [statistics.median(x[i] for x in med[c]) for i in range(3)] for c in med}
print(f"| **median** | off | {m['off'][0]:.1f} | {m['off'][1]:.2f} | {m['off'][2]:.2f} | | |")
print(f"| **median** | on | {m['on'][0]:.1f} | {m['on'][1]:.2f} | {m['on'][2]:.2f} | | |")
print(f"\nwith the cache: throughput x{m['on'][0] / m['off'][0]:.2f}, TTFT P50 x{m['on'][1] / m['off'][1]:.2f}, "
      f"P99 x{m['on'][2] / m['off'][2]:.2f}")
EOF
