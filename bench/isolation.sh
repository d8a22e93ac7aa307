#!/usr/bin/env bash
# The isolation experiment of issue 5, reproducible in one command:
#   (a) capacity: a closed-loop sweep of standard requests; the highest throughput is what
#       the engine sustains (req/s);
#   (b) baseline: ultrafast alone at a low fixed rate -> its TTFT P50/P99 with no other load;
#   (c) tiered: ultrafast at the same rate + standard flooded at FLOOD_FACTOR x capacity;
#   (d) fifo: the same with `--scheduling fifo`.
# Every cell runs on a freshly started `tierserve serve` (port 0). Outputs in OUT_DIR: one
# bench JSON (+ per-request JSONL, HTML) per cell, /metrics before and after each cell,
# the standard tier's share-of-step-budget gauge sampled during the cell, the server's
# logs, and table.md. Builds nothing: expects the tierserve binary.
#
# Usage: bench/isolation.sh   (from anywhere; the defaults take ~8-10 minutes on Gemma 3 270M, -t 2)
# Environment (defaults in brackets):
#   TIERSERVE_BIN [build/bin/tierserve]   TIERSERVE_MODEL [~/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf]
#   THREADS [2]              engine threads (`serve -t`)
#   SERVE_ARGS []            extra `tierserve serve` flags for every cell, e.g. "--step-budget 64"
#   SERVE_WRAP []            a command the server runs under, e.g. "bash bench/throttle.sh 0.8"
#                            (a slower machine: the server's CPU time capped, the client's not)
#   BENCH_ARGS []            extra `tierserve bench` flags for every cell
#   OUT_DIR [build/bench-results/isolation-<UTC timestamp>]
#   SEED [7]
#   STD_INPUT_LEN [32]  STD_OUTPUT_LEN [32]    the standard workload (words, max_tokens)
#   UF_RATE [auto]  UF_INPUT_LEN [200]  UF_OUTPUT_LEN [16]    ultrafast (req/s, words, max_tokens);
#                            auto: UF_SHARE_USE of what the tier's share_max of this machine's
#                            prompt rate serves (the step cost the server measured at start)
#   UF_SHARE_USE [0.5]       with UF_RATE auto: the fraction of its share the fast tier offers
#   UF_PROBES [200]          at least this many ultrafast requests per cell (lengthens the cells)
#   CAP_SWEEP [1,2,4,8,16]  CAP_STEP_S [10]   capacity: closed-loop concurrencies, seconds each
#   FLOOD_FACTOR [3]         standard offered = FLOOD_FACTOR x capacity (req/s)
#   CAPACITY_RPS []          skip (a) and use this capacity
#   BASELINE_S [70]  FLOOD_S [70]  WARMUP_S [3]    durations of the measured phases (s)
#   TIMEOUT_S [300]          client timeout per request (a timeout is a lost request)
#   CELLS [baseline,tiered,fifo]    which of (b)-(d) to run
#   TABLE_ONLY [0]           1: measure nothing, rewrite OUT_DIR/table.md from its files
#   VIA_GATEWAY [0]          1: the benches go through a `tierserve gateway` in front of each
#                            cell's server (a remote tierserve worker with slots enough that
#                            nothing waits in the gateway): the fast tier's isolation through
#                            the hop; the server's /metrics are still read directly
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TIERSERVE_BIN:-$ROOT/build/bin/tierserve}
MODEL=${TIERSERVE_MODEL:-$HOME/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
SERVE_ARGS=${SERVE_ARGS:-}
SERVE_WRAP=${SERVE_WRAP:-}
BENCH_ARGS=${BENCH_ARGS:-}
OUT_DIR=${OUT_DIR:-$ROOT/build/bench-results/isolation-$(date -u +%Y%m%dT%H%M%SZ)}
SEED=${SEED:-7}
STD_INPUT_LEN=${STD_INPUT_LEN:-32}
STD_OUTPUT_LEN=${STD_OUTPUT_LEN:-32}
UF_RATE=${UF_RATE:-auto}
UF_SHARE_USE=${UF_SHARE_USE:-0.5}
UF_PROBES=${UF_PROBES:-200}
UF_INPUT_LEN=${UF_INPUT_LEN:-200}
UF_OUTPUT_LEN=${UF_OUTPUT_LEN:-16}
CAP_SWEEP=${CAP_SWEEP:-1,2,4,8,16}
CAP_STEP_S=${CAP_STEP_S:-10}
FLOOD_FACTOR=${FLOOD_FACTOR:-3}
CAPACITY_RPS=${CAPACITY_RPS:-}
BASELINE_S=${BASELINE_S:-70}
FLOOD_S=${FLOOD_S:-70}
WARMUP_S=${WARMUP_S:-3}
TIMEOUT_S=${TIMEOUT_S:-300}
CELLS=${CELLS:-baseline,tiered,fifo}
TABLE_ONLY=${TABLE_ONLY:-0}
VIA_GATEWAY=${VIA_GATEWAY:-0}

die() { echo "isolation.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

if [ "$TABLE_ONLY" = 1 ]; then
  read -r CAPACITY_RPS FLOOD_RPS < "$OUT_DIR/capacity.txt" || die "no $OUT_DIR/capacity.txt"
  read -r UF_RATE < "$OUT_DIR/uf_rate.txt" || die "no $OUT_DIR/uf_rate.txt"
else
  [ -x "$BIN" ] || die "no tierserve binary at $BIN (build it, or set TIERSERVE_BIN)"
  [ -f "$MODEL" ] || die "no model at $MODEL (set TIERSERVE_MODEL)"
  command -v python3 > /dev/null || die "python3 is needed for the table"
  command -v curl > /dev/null || die "curl is needed to read /metrics"
  mkdir -p "$OUT_DIR"
  log "output: $OUT_DIR"
  log "model: $MODEL, -t $THREADS, serve args: '${SERVE_ARGS}', bench args: '${BENCH_ARGS}', serve wrap: '${SERVE_WRAP}'"

  SPID=""
  GPID=""
  SAMPLER=""
  cleanup() {
    if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2> /dev/null || true; fi
    if [ -n "$GPID" ]; then
      kill "$GPID" 2> /dev/null || true
      wait "$GPID" 2> /dev/null || true
    fi
    if [ -n "$SPID" ]; then
      kill "$SPID" 2> /dev/null || true
      wait "$SPID" 2> /dev/null || true
    fi
  }
  trap cleanup EXIT

  # start_server CELL [serve flags...]: a fresh server on port 0; sets SPID and URL (the
  # server) and BENCH_URL (where the benches go: the server, or with VIA_GATEWAY=1 a fresh
  # gateway in front of it, GPID).
  start_server() {
    local cell=$1
    shift
    local port_file="$OUT_DIR/$cell.port"
    rm -f "$port_file"
    # shellcheck disable=SC2086  # SERVE_WRAP is a command, SERVE_ARGS a list of flags
    $SERVE_WRAP "$BIN" serve -m "$MODEL" -t "$THREADS" -p 0 --port-file "$port_file" "$@" $SERVE_ARGS \
      > "$OUT_DIR/$cell.serve.out" 2> "$OUT_DIR/$cell.serve.err" &
    SPID=$!
    for _ in $(seq 1 600); do
      [ -s "$port_file" ] && break
      kill -0 "$SPID" 2> /dev/null || die "server for $cell exited: $(tail -5 "$OUT_DIR/$cell.serve.err")"
      sleep 0.1
    done
    [ -s "$port_file" ] || die "server for $cell did not start in 60 s"
    URL="http://127.0.0.1:$(head -1 "$port_file")"
    BENCH_URL=$URL
    [ "$VIA_GATEWAY" = 1 ] || return 0
    local gport="$OUT_DIR/$cell.gateway.port"
    rm -f "$gport"
    cat > "$OUT_DIR/$cell.gateway.yaml" << GWEOF
workers:
  - {name: worker, kind: tierserve, model: $(basename "$MODEL" .gguf), url: "$URL", max_inflight: 65536}
tiers:
  - {name: ultrafast, max_queued_requests: 100000}
  - {name: standard, max_queued_requests: 100000}
  - {name: batch, max_queued_requests: 100000}
log: {access: false}
GWEOF
    "$BIN" gateway -c "$OUT_DIR/$cell.gateway.yaml" -p 0 --port-file "$gport" --work-dir "$OUT_DIR/$cell.gateway.d" \
      > "$OUT_DIR/$cell.gateway.out" 2> "$OUT_DIR/$cell.gateway.err" &
    GPID=$!
    for _ in $(seq 1 600); do
      [ -s "$gport" ] && break
      kill -0 "$GPID" 2> /dev/null || die "gateway for $cell exited: $(tail -5 "$OUT_DIR/$cell.gateway.err")"
      sleep 0.1
    done
    [ -s "$gport" ] || die "gateway for $cell did not start in 60 s"
    BENCH_URL="http://127.0.0.1:$(head -1 "$gport")"
    for _ in $(seq 1 100); do curl -s -f "$BENCH_URL/health/ready" > /dev/null && break; sleep 0.1; done
  }

  stop_server() {
    if [ -n "$GPID" ]; then
      kill "$GPID" 2> /dev/null || true
      wait "$GPID" 2> /dev/null || log "warning: the gateway did not exit 0"
      GPID=""
    fi
    kill "$SPID" 2> /dev/null || true
    local rc=0
    wait "$SPID" || rc=$?
    SPID=""
    [ "$rc" = 0 ] || log "warning: server exited $rc (SIGTERM should drain and exit 0)"
  }

  # Samples the standard tier's step-budget share and queue gauges every 0.5 s.
  start_sampler() {
    local out=$1
    : > "$out"
    (
      while true; do
        curl -s --max-time 2 "$URL/metrics" |
          awk -v t="$(date +%s.%N)" '/^tierserve_(step_budget_share_ratio|queued_requests|running_requests)\{tier="standard"\}/ {
            sub(/\{.*/, "", $1); v[$1] = $2 }
            END { print t, v["tierserve_step_budget_share_ratio"], v["tierserve_queued_requests"], v["tierserve_running_requests"] }' \
          >> "$out" || true
        sleep 0.5
      done
    ) &
    SAMPLER=$!
  }
  stop_sampler() {
    kill "$SAMPLER" 2> /dev/null || true
    wait "$SAMPLER" 2> /dev/null || true
    SAMPLER=""
  }

  # bench CELL args...: one `tierserve bench` run; exit 3 (an SLO failed) cannot happen
  # without --slo, anything but 0 stops the script.
  bench() {
    local cell=$1
    shift
    local rc=0
    # shellcheck disable=SC2086
    "$BIN" bench --url "$BENCH_URL" --timeout "$TIMEOUT_S" -q \
      --json "$OUT_DIR/$cell.json" --requests-jsonl "$OUT_DIR/$cell.requests.jsonl" --html "$OUT_DIR/$cell.html" \
      "$@" $BENCH_ARGS > "$OUT_DIR/$cell.bench.txt" 2> "$OUT_DIR/$cell.bench.err" || rc=$?
    [ "$rc" = 0 ] || die "bench for $cell exited $rc: $(tail -5 "$OUT_DIR/$cell.bench.err")"
  }

  # run_cell CELL SCHEDULING DURATION_S FLOOD(yes|no): server up, metrics before, gauge
  # sampler, the ultrafast bench (+ the standard flood bench, concurrently), metrics after,
  # server down.
  run_cell() {
    local cell=$1 sched=$2 dur=$3 flood=$4
    start_server "$cell" --scheduling "$sched"
    log "$cell: server $URL (scheduling $sched), pid $SPID; benches on $BENCH_URL"
    cut -d' ' -f1 /proc/loadavg > "$OUT_DIR/$cell.loadavg"
    curl -s "$URL/metrics" > "$OUT_DIR/$cell.metrics.before.txt"
    start_sampler "$OUT_DIR/$cell.gauges.tsv"
    local spid_bench=""
    if [ "$flood" = yes ]; then
      ( bench "$cell.standard" "${STD_LOAD[@]}" --no-cold-start --warmup-s "$WARMUP_S" --duration "$dur" ) &
      spid_bench=$!
    fi
    bench "$cell.ultrafast" "${UF_LOAD[@]}" --no-cold-start --warmup-s "$WARMUP_S" --duration "$dur"
    if [ -n "$spid_bench" ]; then
      wait "$spid_bench" || die "the standard bench of $cell failed"
    fi
    stop_sampler
    cut -d' ' -f1 /proc/loadavg >> "$OUT_DIR/$cell.loadavg"
    curl -s "$URL/metrics" > "$OUT_DIR/$cell.metrics.after.txt"
    stop_server
    local t
    for t in ultrafast standard; do
      [ -f "$OUT_DIR/$cell.$t.bench.txt" ] &&
        log "$cell: $(grep -E "^  $t " "$OUT_DIR/$cell.$t.bench.txt" | tr -s ' ')"
    done
    return 0
  }

  # shellcheck disable=SC2086
  "$BIN" serve --print-config -m "$MODEL" $SERVE_ARGS > "$OUT_DIR/config.yaml" 2> /dev/null ||
    die "serve --print-config failed with SERVE_ARGS='$SERVE_ARGS'"

  STD_WORKLOAD=(--input-len "$STD_INPUT_LEN" --output-len "$STD_OUTPUT_LEN")

  # (a) capacity
  if [ -z "$CAPACITY_RPS" ]; then
    start_server capacity --scheduling tiered
    log "capacity: closed-loop sweep $CAP_SWEEP, ${CAP_STEP_S} s per step, on $URL"
    bench capacity --mode closed --sweep "$CAP_SWEEP" --sweep-step-s "$CAP_STEP_S" --warmup-s "$WARMUP_S" \
      --tier-mix standard --seed "$SEED" "${STD_WORKLOAD[@]}"
    stop_server
    CAPACITY_RPS=$(python3 -c 'import json, sys
steps = json.load(open(sys.argv[1]))["sweep"]["steps"]
print("%.3f" % max(s["stats"]["overall"]["throughput_rps"] for s in steps))' "$OUT_DIR/capacity.json")
  fi
  FLOOD_RPS=$(python3 -c "print('%.3f' % ($FLOOD_FACTOR * $CAPACITY_RPS))")
  log "capacity: $CAPACITY_RPS req/s; standard flood: $FLOOD_RPS req/s"
  echo "$CAPACITY_RPS $FLOOD_RPS" > "$OUT_DIR/capacity.txt"

  # The fast tier's load from this machine's measured step cost: UF_SHARE_USE of what its
  # share_max of the prompt rate serves with prompts of UF_INPUT_LEN words (one word ~ 1.3
  # tokens), so that it stays within its share on a slow CPU as on a fast one.
  start_server stepcost --scheduling tiered
  curl -s "$URL/admin/stats" > "$OUT_DIR/stepcost.stats.json"
  stop_server
  if [ "$UF_RATE" = auto ]; then
    UF_RATE=$(python3 -c 'import json, re, sys
s = json.load(open(sys.argv[1]))
cfg = open(sys.argv[2]).read()
share = float(re.search(r"- name: ultrafast\n(?:\s+\w+: .*\n)*?\s+share_max: ([0-9.eE+-]+)", cfg).group(1))
tokens = 1.3 * float(sys.argv[3])
ms = s["step_cost"]["token_ms"] + s["step_cost"]["pair_ns"] * 1e-6 * tokens / 2
print("%.3f" % (float(sys.argv[4]) * share * (1000.0 / ms) / tokens))' \
      "$OUT_DIR/stepcost.stats.json" "$OUT_DIR/config.yaml" "$UF_INPUT_LEN" "$UF_SHARE_USE")
  fi
  # At least UF_PROBES ultrafast requests in each cell.
  # (Poisson arrivals: a fifth more time than the mean needs, so that few cells fall short.)
  MIN_S=$(python3 -c "import math; print(math.ceil(1.2 * $UF_PROBES / $UF_RATE))")
  [ "$BASELINE_S" -ge "$MIN_S" ] || BASELINE_S=$MIN_S
  [ "$FLOOD_S" -ge "$MIN_S" ] || FLOOD_S=$MIN_S
  log "ultrafast: $UF_RATE req/s of $UF_INPUT_LEN-word prompts; cells of $BASELINE_S s (baseline) and $FLOOD_S s (floods)"
  echo "$UF_RATE" > "$OUT_DIR/uf_rate.txt"

  # Each tier is its own bench process with its own request shape and arrival process
  # (one bench run has one length distribution for all tiers); both start together and run
  # the same warm-up and duration. Files: CELL.ultrafast.* and CELL.standard.*.
  UF_LOAD=(--tier-rate "ultrafast=$UF_RATE" --arrival poisson --seed "$SEED" --input-len "$UF_INPUT_LEN" --output-len "$UF_OUTPUT_LEN")
  STD_LOAD=(--tier-rate "standard=$FLOOD_RPS" --arrival poisson --seed "$((SEED + 1))" "${STD_WORKLOAD[@]}")

  IFS=, read -r -a cells <<< "$CELLS"
  for cell in "${cells[@]}"; do
    case $cell in
      baseline)
        log "baseline: ultrafast alone at $UF_RATE req/s for $BASELINE_S s"
        run_cell baseline tiered "$BASELINE_S" no
        ;;
      tiered | fifo)
        log "$cell: ultrafast $UF_RATE req/s + standard $FLOOD_RPS req/s for $FLOOD_S s"
        run_cell "$cell" "$cell" "$FLOOD_S" yes
        ;;
      *) die "unknown cell '$cell' in CELLS (baseline, tiered, fifo)" ;;
    esac
  done
fi

# table.md: from the JSON, the metrics before/after and the sampled gauges of each cell.
python3 - "$OUT_DIR" "$CAPACITY_RPS" "$FLOOD_RPS" "$FLOOD_FACTOR" "$MODEL" "$THREADS" "$SERVE_ARGS" \
  "$UF_RATE" "$UF_INPUT_LEN" "$UF_OUTPUT_LEN" "$STD_INPUT_LEN" "$STD_OUTPUT_LEN" "$CELLS" "$SERVE_WRAP" \
  << 'EOF' > "$OUT_DIR/table.md"
import json, os, re, sys, time

(out, cap, flood, factor, model, threads, serve_args, uf_rate, uf_in, uf_out, std_in, std_out,
 cells, serve_wrap) = sys.argv[1:]
cells = cells.split(",")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def metrics(path):
    m = {}
    try:
        for line in open(path):
            if line.startswith("#") or " " not in line:
                continue
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    except OSError:
        pass
    return m


def delta(cell, name):
    a, b = metrics(f"{out}/{cell}.metrics.after.txt"), metrics(f"{out}/{cell}.metrics.before.txt")
    return a.get(name, 0.0) - b.get(name, 0.0)


def tier_stats(j, tier, phase="steady"):
    if not j or phase not in j:
        return None
    for t in j[phase].get("tiers", []):
        if t["tier"] == tier:
            return t
    return None


def floor_of(tier):
    try:
        text = open(f"{out}/config.yaml").read()
    except OSError:
        return None
    m = re.search(r"- name: %s\n(?:\s+\w+: .*\n)*?\s+share_min: ([0-9.eE+-]+)" % tier, text)
    return float(m.group(1)) if m else None


def pct(t, p):
    if not t or not t.get("ttft_ms") or not t["ttft_ms"].get("n"):
        return None
    return t["ttft_ms"][p]


def f0(x):
    return "—" if x is None else "%.0f" % x


def refused(t):
    e = t.get("errors_by_type", {}) if t else {}
    # 429/503 before the headers, or in-band after a stream's headers went out at admission
    return e.get("http_429", 0) + e.get("http_503", 0) + e.get("stream_refused", 0)


def counts(j, tier):
    """The steady state's typed outcomes, plus the warm-up's (the bench keeps only its
    request and error counts, untyped); the server counts both phases."""
    t = tier_stats(j, tier) or {"requests": 0, "ok": 0, "errors": 0}
    w = j.get("warmup") or {}
    return {"requests": t["requests"], "ok": t["ok"], "refused": refused(t),
            "other": t["errors"] - refused(t), "warm": w.get("requests", 0), "warm_err": w.get("errors", 0)}


def gauge_share(cell):
    vals = []
    try:
        for line in open(f"{out}/{cell}.gauges.tsv"):
            p = line.split()
            if len(p) == 4 and float(p[2]) > 0:  # standard had queued requests
                vals.append(float(p[1]))
    except (OSError, ValueError):
        pass
    return (sum(vals) / len(vals), len(vals)) if vals else (None, 0)


def admitted(cell):
    """The steady state's ultrafast requests: TTFTs of those served on ultrafast (sorted),
    how many were downgraded (served on another tier) and how many refused (429/503)."""
    ttft, down, refused_n = [], 0, 0
    try:
        for line in open(f"{out}/{cell}.ultrafast.requests.jsonl"):
            r = json.loads(line)
            if r.get("phase") != "steady":
                continue
            if r.get("status") in (429, 503) or r.get("error") == "stream_refused":
                refused_n += 1
            elif r.get("status") == 200 and r.get("tier_served") == "ultrafast":
                # An answer with no content token (its one token was empty text) has no
                # TTFT: its end to end time stands for it (when the client had it all).
                ttft.append(r["ttft_ms"] if r.get("ttft_ms") is not None else r["e2e_ms"])
            elif r.get("status") == 200:
                down += 1
    except (OSError, ValueError):
        pass
    return sorted(ttft), down, refused_n


def q(v, p):
    if not v:
        return None
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]


def cpu():
    try:
        info = {}
        for l in open("/proc/cpuinfo"):
            if ":" in l:
                k, v = (x.strip() for x in l.split(":", 1))
                info.setdefault(k, v)
        name, flags = info["model name"], info["flags"].split()
    except (OSError, KeyError):
        return "unknown"
    isa = "AMX" if "amx_int8" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    # "AMD EPYC" alone does not tell Zen 3 from Zen 4: the family and model numbers do.
    forced = os.environ.get("TIERSERVE_ISA", "")
    kernels = f"; kernels forced by TIERSERVE_ISA={forced}" if forced else ""
    wrap = f"; the server run under `{serve_wrap}`" if serve_wrap else ""
    return (f"{name} (family {info.get('cpu family', '?')} model {info.get('model', '?')}, {os.cpu_count()} CPUs, "
            f"{isa}{kernels}{wrap})")


btt, _, _ = admitted("baseline")
b50, b99 = q(btt, 0.5), q(btt, 0.99)
floor = floor_of("standard")
print(f"## Isolation experiment ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
print(f"- CPU: {cpu()}")
print(f"- model `{os.path.basename(model)}`, `tierserve serve -t {threads} {serve_args}".rstrip()
      + "`; load average (1 min) at each cell's start and end in the first column")
print(f"- capacity (max throughput of a closed-loop standard sweep, {std_in}-word prompts, max_tokens {std_out}): "
      f"**{float(cap):.2f} req/s**; standard flooded at {factor}x = {float(flood):.2f} req/s (Poisson)")
print(f"- ultrafast: {uf_rate} req/s Poisson, {uf_in}-word prompts, max_tokens {uf_out}; "
      f"standard floor (`share_min`): {floor}")
print(f"- TTFT from each request's scheduled send time; raw data in `{out}`\n")
print("Ultrafast TTFT percentiles are those of the requests **served on ultrafast** (admitted); the ones "
      "downgraded or refused are counted beside them (explicit degradation, with its reason).\n")
print("| cell (load avg) | ultrafast n | served on ultrafast | downgraded / refused | admitted TTFT P50 / P99 ms "
      "| P99 / P50 | × baseline P50 / P99 | ultrafast errors "
      "| standard ok / sent | standard req/s | standard out tok/s | standard share of tokens (floor) "
      "| standard share gauge while queued (samples) | standard errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for cell in cells:
    uf = tier_stats(load(f"{out}/{cell}.ultrafast.json"), "ultrafast")
    st = tier_stats(load(f"{out}/{cell}.standard.json"), "standard")
    tt, down, ref = admitted(cell)
    p50, p99 = q(tt, 0.5), q(tt, 0.99)
    spread = "—" if not p50 or not p99 else "%.2f" % (p99 / p50)
    ratio = "—"
    if cell != "baseline" and p50 and p99 and b50 and b99:
        ratio = "%.2f / %.2f" % (p50 / b50, p99 / b99)
    tok = {t: sum(delta(cell, f'tierserve_tokens_total{{tier="{t}",direction="{d}"}}') for d in ("in", "out"))
           for t in ("ultrafast", "standard", "batch")}
    tot = sum(tok.values())
    share = "—" if not st or tot <= 0 else "%.3f (%s)" % (tok["standard"] / tot, floor)
    g, ng = gauge_share(cell)
    gs = "—" if g is None else "%.3f (%d)" % (g, ng)
    uf_err = json.dumps(uf.get("errors_by_code", {})) if uf else "—"
    if uf and not uf.get("errors_by_code"):
        uf_err = "0"
    try:
        la = "/".join(open(f"{out}/{cell}.loadavg").read().split())
    except OSError:
        la = "?"
    row = [f"{cell} ({la})", str(uf["requests"]) if uf else "—", str(len(tt)), f"{down} / {ref}",
           f"{f0(p50)} / {f0(p99)}", spread, ratio, uf_err]
    if st:
        errs = ", ".join(f"{k} × {v}" for k, v in sorted(st.get("errors_by_code", {}).items())) or "0"
        row += [f"{st['ok']} / {st['requests']}", "%.2f" % st["throughput_rps"], "%.0f" % st["output_tok_s"],
                share, gs, errs]
    else:
        row += ["—"] * 6
    print("| " + " | ".join(row) + " |")

print("\n### Nothing lost: accepted vs completed (steady state), and the server's counters\n")
print("Lost = accepted − completed: timeouts, dropped connections, truncated streams. The server's "
      "`tierserve_requests_total` deltas cover the warm-up too; they agree when its ok equals the client's "
      "successes (less the ultrafast ones downgraded to standard, which it counts there) and its rejected + "
      "error + cancelled equal the client's errors, both over warm-up + steady.\n")
print("| cell | tier | sent | refused 429/503 (+ Retry-After) | accepted | completed | lost | warm-up sent / errors "
      "| server ok / rejected / error / cancelled | agree |")
print("|---|---|---|---|---|---|---|---|---|---|")


def moved_failures(cell):
    """Ultrafast requests of the steady state admitted on the tier they were moved to and
    failed there (a stream refused after that tier's max wait). One refused at arrival
    (429) is counted under ultrafast, the tier it asked for, wherever it would have gone."""
    n = 0
    try:
        for line in open(f"{out}/{cell}.ultrafast.requests.jsonl"):
            r = json.loads(line)
            if (r.get("phase") == "steady" and r.get("status") == 200 and r.get("error")
                    and r.get("tier_served") not in (None, "ultrafast")):
                n += 1
    except (OSError, ValueError):
        pass
    return n


def retry_after_ok(cell, tier):
    try:
        for line in open(f"{out}/{cell}.{tier}.requests.jsonl"):
            r = json.loads(line)
            if r.get("status") in (429, 503) and not r.get("retry_after_s"):
                return False
    except (OSError, ValueError):
        return False
    return True


for cell in cells:
    for tier in ("ultrafast", "standard"):
        j = load(f"{out}/{cell}.{tier}.json")
        if not j:
            continue
        n = counts(j, tier)
        srv = {o: delta(cell, f'tierserve_requests_total{{tier="{tier}",outcome="{o}"}}')
               for o in ("ok", "rejected", "error", "cancelled")}
        accepted = n["requests"] - n["refused"]
        lost = accepted - n["ok"]
        client_ok = n["ok"] + n["warm"] - n["warm_err"]
        client_failed = n["refused"] + n["other"] + n["warm_err"]
        # The server counts an answer under the tier that served it: an ultrafast request
        # downgraded to standard is standard's ok there (the steady state's, from the
        # ultrafast requests' records).
        # So is one downgraded, admitted there and then refused (a stream refused on
        # standard after its max wait): standard's rejected or error.
        moved, moved_failed = admitted(cell)[1], moved_failures(cell)
        sign = -1 if tier == "ultrafast" else 1
        expect_ok = client_ok + sign * moved
        expect_failed = client_failed + sign * moved_failed
        agree = srv["ok"] == expect_ok and srv["rejected"] + srv["error"] + srv["cancelled"] == expect_failed
        ra = "" if not n["refused"] else (" ✓" if retry_after_ok(cell, tier) else " (Retry-After missing!)")
        print(f"| {cell} | {tier} | {n['requests']} | {n['refused']}{ra} | {accepted} | {n['ok']} | "
              f"{lost}{' ⚠' if lost else ''} | {n['warm']} / {n['warm_err']} | {srv['ok']:.0f} / "
              f"{srv['rejected']:.0f} / {srv['error']:.0f} / {srv['cancelled']:.0f} | {'yes' if agree else 'NO'} |")
EOF
log "table: $OUT_DIR/table.md"
cat "$OUT_DIR/table.md"
