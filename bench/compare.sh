#!/usr/bin/env bash
# Side-by-side benchmark of tierserve and the peers (llama.cpp, ik_llama.cpp): decode (tg128, at depth 0
# and 512) and prompt processing (pp512) on random-weight 110m and 0.5b models in Q8_0
# and Q4_K_M, 1 and 2 threads, medians of 3 runs, as a markdown table (docs/BENCHMARKS.md).
#
#   bash bench/peer.sh                 # once: builds build/peer/{gcc,clang,ik}
#   bash bench/compare.sh              # all models, 1 and 2 threads
#   bash bench/compare.sh --models llama:110m:q8_0 --threads 2 --reps 5
#   bash bench/peer.sh --variants "gcc ik" --isa avx2 && bash bench/compare.sh --isa avx2 --peers gcc,ik
#                                      # every engine on its AVX2 code (what an AVX2-only CPU runs)
#
# Options are those of bench/compare.py (--help). Needs the tierserve binary in
# build/bin (or --tierserve) and the project venv (.venv: llama-cpp-python, gguf).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$ROOT/.venv/bin/python
[[ -x $PY ]] || PY=python3
exec "$PY" "$ROOT/bench/compare.py" "$@"
