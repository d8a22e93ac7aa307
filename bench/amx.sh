#!/usr/bin/env bash
# The AMX kernels on a CPU that has AMX-INT8 (Sapphire Rapids and later): checks that they
# give the same bits as the AVX-512 VNNI kernels and measures both, side by side.
#
#   bash bench/amx.sh [--reps N]     # after scripts/build.sh; exit 77 without AMX
#
# On a machine without the build's packages, copy build/bin/tierserve,
# build/src/kernels/matmul_test and build/tests/batching_test into a checkout's build/ with
# the shared libraries `ldd build/bin/tierserve` names (libpcre2-8, libyaml-cpp) on
# LD_LIBRARY_PATH; the models are made on the spot (random weights, no download).
#
# 1. matmul_test, whose panel tests include the hardware AMX path on such a CPU.
# 2. batching_test: 16 sequences (steps of 16+ tokens on the tiles) == solo (VNNI).
# 3. Per model (random weights, real shapes: 110m and 0.5b, Q8_0 and Q4_K_M; made once into
#    build/bench-models) and thread count: a prompt of ~500 tokens and 8 generated tokens with
#    TIERSERVE_ISA=avx512 and native, alternating, N reps: the logits hashes must agree,
#    and the median prompt tok/s of each is printed with their ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=$ROOT/build
BIN=$B/bin/tierserve
REPS=3
[[ ${1:-} == --reps ]] && REPS=$2
if ! grep -qw amx_int8 /proc/cpuinfo; then
  echo "amx.sh: this CPU has no AMX-INT8 (/proc/cpuinfo); nothing to measure" >&2
  exit 77
fi
[[ -x $BIN ]] || { echo "amx.sh: build first (bash scripts/build.sh)" >&2; exit 1; }

echo "== 1. panel kernels, every path (AMX included) against vec_dot" >&2
"$B/src/kernels/matmul_test" --gtest_brief=1
echo "== 2. batched (AMX steps) == solo" >&2
"$B/tests/batching_test" --gtest_brief=1 --gtest_filter='Tiny/BatchedEqualsSolo.*:Batching.SeededSamplingEqualsSolo'

echo "== 3. end to end: TIERSERVE_ISA=avx512 vs native" >&2
mkdir -p "$B/bench-models"
PROMPT=$(python3 - <<'EOF'
words = ("the quick brown fox jumps over the lazy dog while a small bird sings in the old "
         "oak tree near the river and the children walk home from school talking about "
         "their day ").split()
print(" ".join(words[i % len(words)] for i in range(240)))
EOF
)
printf '%-22s %2s %12s %12s %7s %s\n' model t "avx512 tok/s" "amx tok/s" ratio hashes
for spec in llama:110m:q8_0 llama:110m:q4_k_m qwen2:0.5b:q8_0 qwen2:0.5b:q4_k_m; do
  IFS=: read -r arch shape typ <<<"$spec"
  model=$B/bench-models/$arch-$shape-$typ.gguf
  [[ -f $model ]] || "$BIN" make-model --arch "$arch" --shape "$shape" --type "$typ" -o "$model" >&2
  for t in 1 2; do
    out=$(for r in $(seq "$REPS"); do
      for isa in avx512 native; do
        printf '%s ' "$isa"
        TIERSERVE_ISA=$isa "$BIN" run -m "$model" -p "$PROMPT" -n 8 -t "$t" --temp 0 --ignore-eos -b 512 --json \
          2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["kernels"], j["prompt_tok_s"], j["logits_hash"])'
      done
    done)
    python3 - "$spec" "$t" <<EOF
import statistics, sys
rows = [l.split() for l in """$out""".strip().splitlines()]
by = {"avx512": [], "native": []}
hashes = set()
kernels = set()
for isa, kern, tps, h in rows:
    by[isa].append(float(tps))
    hashes.add(h)
    if isa == "native":
        kernels.add(kern)
a, n = statistics.median(by["avx512"]), statistics.median(by["native"])
ok = "same" if len(hashes) == 1 else "DIFFER " + " ".join(sorted(hashes))
print(f"{sys.argv[1]:<22} {sys.argv[2]:>2} {a:12.1f} {n:12.1f} {n / a:6.2f}x {ok} (native: {','.join(sorted(kernels))})")
sys.exit(0 if len(hashes) == 1 and kernels == {"amx"} else 1)
EOF
  done
done
