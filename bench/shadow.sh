#!/usr/bin/env bash
# What shadow traffic costs the stable version's clients (docs/BENCHMARKS.md, shadow
# traffic): one stable worker and one candidate worker (random-weight models made by
# `tierserve make-model`, seeds 1 and 2, THREADS engine threads each, no download), two
# gateways in front of the same two workers — one without shadow traffic, one mirroring
# every request (fraction 1.0) to the candidate into a pair database — and the load tester
# in comparison mode (the same open-loop workload to both, ABBA blocks over ROUNDS
# rounds): the stable answers' TTFT and end-to-end P50/P99 with and without the shadow, as
# ratios, and the pairs recorded. On one machine the candidate's worker shares the CPU
# with the stable one (and the load tester and gateways); on a fleet it has machines of
# its own. Builds nothing.
#
# Usage: bench/shadow.sh
# Environment: TIERSERVE_BIN [build/bin/tierserve]  N [300]  RATE [10]  ROUNDS [4]
#   MAX_TOKENS [16]  SHAPE [15m]  THREADS [1]  OUT_DIR [build/bench-results/shadow-<UTC>]
#   CANDIDATE_MODEL [the make-model of seed 2]: a near-free candidate (e.g. stories260K)
#   leaves the gateway's own cost of mirroring (the extra call, the SQLite write)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
N=${N:-300}
RATE=${RATE:-10}
ROUNDS=${ROUNDS:-4}
MAX_TOKENS=${MAX_TOKENS:-16}
SHAPE=${SHAPE:-15m}
THREADS=${THREADS:-1}
OUT_DIR=${OUT_DIR:-$ROOT/build/bench-results/shadow-$(date -u +%Y%m%dT%H%M%SZ)}
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "shadow.sh: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no tierserve binary at $BIN"
mkdir -p "$OUT_DIR"
for seed in 1 2; do
  m=$OUT_DIR/llama${SHAPE}_q8_0_seed$seed.gguf
  [ -f "$m" ] || "$BIN" make-model --arch llama --shape "$SHAPE" --type q8_0 --seed "$seed" -o "$m" > /dev/null
done

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
start_worker "$OUT_DIR/llama${SHAPE}_q8_0_seed1.gguf" "$THREADS" m
STABLE=$WORKER
mv "$OUT_DIR/worker.port" "$OUT_DIR/stable.port"
start_worker "${CANDIDATE_MODEL:-$OUT_DIR/llama${SHAPE}_q8_0_seed2.gguf}" "$THREADS" m
CANDIDATE=$WORKER

gateway() {  # NAME SHADOW(yes|no): sets GW to its URL
  local name=$1 shadow=$2
  {
    echo "workers:"
    echo "  - {name: stable, kind: tierserve, model: m, version: v1, url: \"$STABLE\", max_inflight: 64}"
    echo "  - {name: candidate, kind: tierserve, model: m, version: v2, url: \"$CANDIDATE\", max_inflight: 64}"
    if [ "$shadow" = yes ]; then
      echo "models: {m: {versions: {v1: 1, v2: 0}, stable: v1, shadow: {version: v2, fraction: 1.0}}}"
      echo "shadow: {db: \"$OUT_DIR/pairs.db\", max_wait_ms: 10000, share_max: 1.0}"
    else
      echo "models: {m: {versions: {v1: 1, v2: 0}, stable: v1}}"
    fi
  } > "$OUT_DIR/$name.yaml"
  "$BIN" gateway -c "$OUT_DIR/$name.yaml" -p 0 --port-file "$OUT_DIR/$name.port" --work-dir "$OUT_DIR/$name.d" \
    > "$OUT_DIR/$name.out" 2> "$OUT_DIR/$name.err" &
  PIDS+=($!)
  wait_port "$OUT_DIR/$name.port" "${PIDS[-1]}"
  GW=http://127.0.0.1:$(head -1 "$OUT_DIR/$name.port")
}
gateway plain no
PLAIN=$GW
gateway shadow yes
SHADOWED=$GW
sleep 1  # both gateways see both workers healthy

log "no shadow vs shadow (every request mirrored): $N requests each at $RATE req/s, $ROUNDS ABBA rounds"
"$BIN" bench --url "$PLAIN" --compare-url "$SHADOWED" --label no-shadow --compare-label shadow --model m \
  --mode open --rate "$RATE" -n "$N" --compare-rounds "$ROUNDS" --warmup 20 --input-len 32 --output-len "$MAX_TOKENS" \
  --tier-mix standard=1 -q --json "$OUT_DIR/compare.json" > "$OUT_DIR/compare.txt"
pairs=$(curl -s "$SHADOWED/metrics" | awk '/^tierserve_gateway_shadow_total\{model="m",outcome="recorded"\}/ {print $2}')
python3 - "$OUT_DIR/compare.json" "${pairs:-0}" "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" << 'EOF'
import json, sys
j, pairs, cpu = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
c = j["compare"]
a, b = c["a"]["stats"]["overall"], c["b"]["stats"]["overall"]
print(f"CPU: {cpu}")
print(f"stable answers, no shadow vs shadow: TTFT P50 {a['ttft_ms']['p50']:.1f} / {b['ttft_ms']['p50']:.1f} ms, "
      f"P99 {a['ttft_ms']['p99']:.1f} / {b['ttft_ms']['p99']:.1f} ms; E2E P99 {a['e2e_ms']['p99']:.1f} / {b['e2e_ms']['p99']:.1f} ms")
r = c["ratio_b_over_a"]
print(f"ratios shadow/no-shadow: TTFT P50 {r['ttft_p50']:.3f}, P99 {r['ttft_p99']:.3f}, E2E P50 {r['e2e_p50']:.3f}, P99 {r['e2e_p99']:.3f}")
print(f"pairs recorded: {pairs}")
EOF
log "results in $OUT_DIR"
