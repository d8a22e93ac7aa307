#!/usr/bin/env bash
# The cost of the gateway's hop (docs/BENCHMARKS.md, gateway): the same short requests at
# RATE req/s against one `tierserve serve` directly and through a `tierserve gateway` in
# front of it, in alternating blocks of one `tierserve bench --compare-url` run (ABBA,
# COMPARE_ROUNDS rounds), streamed. The worker runs a tiny random-weight model (made by
# `tierserve make-model`) so that the engine is far from saturated and what differs is the
# hop: TTFT P50/P99 of each, and the differences. Builds nothing.
#
# Usage: bench/gateway.sh
# Environment: TIERSERVE_BIN [build/bin/tierserve]  RATE [200]  DURATION_S [60]
#   COMPARE_ROUNDS [6]  INPUT_LEN [8]  OUTPUT_LEN [4]  THREADS [1]  OUT_DIR [build/bench-results/gateway-<UTC>]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
RATE=${RATE:-200}
DURATION_S=${DURATION_S:-60}
COMPARE_ROUNDS=${COMPARE_ROUNDS:-6}
INPUT_LEN=${INPUT_LEN:-8}
OUTPUT_LEN=${OUTPUT_LEN:-4}
THREADS=${THREADS:-1}
OUT_DIR=${OUT_DIR:-$ROOT/build/bench-results/gateway-$(date -u +%Y%m%dT%H%M%SZ)}
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "gateway.sh: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no tierserve binary at $BIN"
mkdir -p "$OUT_DIR"
MODEL=$OUT_DIR/tiny_q8_0.gguf
[ -f "$MODEL" ] || "$BIN" make-model --arch llama --shape tiny --type q8_0 -o "$MODEL" > /dev/null

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
start_worker "$MODEL" "$THREADS" tiny
cat > "$OUT_DIR/gateway.yaml" << EOF
workers:
  - {name: worker, kind: tierserve, model: tiny, url: "$WORKER", max_inflight: 4096}
log: {access: false}
EOF
"$BIN" gateway -c "$OUT_DIR/gateway.yaml" -p 0 --port-file "$OUT_DIR/gateway.port" --work-dir "$OUT_DIR/gateway.d" \
  > "$OUT_DIR/gateway.out" 2> "$OUT_DIR/gateway.err" &
PIDS+=($!)
wait_port "$OUT_DIR/gateway.port" "${PIDS[-1]}"
GATEWAY=http://127.0.0.1:$(head -1 "$OUT_DIR/gateway.port")
for _ in $(seq 1 100); do curl -s -f "$GATEWAY/health/ready" > /dev/null && break; sleep 0.1; done
log "worker $WORKER, gateway $GATEWAY; $RATE req/s for $DURATION_S s in $COMPARE_ROUNDS ABBA rounds"

"$BIN" bench --url "$GATEWAY" --label gateway --compare-url "$WORKER" --compare-label direct \
  --compare-rounds "$COMPARE_ROUNDS" --model tiny --rate "$RATE" --duration "$DURATION_S" --warmup-s 3 \
  --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --tier-mix standard --no-cold-start -q \
  --json "$OUT_DIR/compare.json" > "$OUT_DIR/compare.txt" 2> "$OUT_DIR/compare.err" ||
  die "bench failed: $(tail -5 "$OUT_DIR/compare.err")"
cat "$OUT_DIR/compare.txt"
python3 - "$OUT_DIR/compare.json" << 'EOF' | tee "$OUT_DIR/table.md"
import json, sys
j = json.load(open(sys.argv[1]))
info = {}
for l in open("/proc/cpuinfo"):
    if ":" in l:
        k, v = (x.strip() for x in l.split(":", 1))
        info.setdefault(k, v)
flags = info.get("flags", "").split()
isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
cpu = f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')}, {isa}, {len([1 for l in open('/proc/cpuinfo') if l.startswith('processor')])} vCPUs)"
def find(o, label):
    # compare-mode JSON: compare.a (--url) and compare.b (--compare-url), each a label and
    # the phase stats of its blocks
    for side in ("a", "b"):
        t = o.get("compare", {}).get(side)
        if t and t.get("label") == label:
            return t["stats"]
    return None
g, d = find(j, "gateway"), find(j, "direct")
if g is None or d is None:
    sys.exit("unexpected compare JSON: " + ", ".join(j.keys()))
def q(t, k):
    return t["overall"]["ttft_ms"][k]
print(f"CPU: {cpu}\n")
print("| target | requests | errors | TTFT P50 ms | TTFT P99 ms |")
print("|---|---|---|---|---|")
for name, t in (("direct", d), ("gateway", g)):
    o = t["overall"]
    print(f"| {name} | {o['requests']} | {o['errors']} | {q(t, 'p50'):.2f} | {q(t, 'p99'):.2f} |")
print(f"| **gateway − direct** | | | **{q(g, 'p50') - q(d, 'p50'):+.2f}** | **{q(g, 'p99') - q(d, 'p99'):+.2f}** |")
EOF
