#!/usr/bin/env bash
# Batched decoding side by side with llama.cpp's and ik_llama.cpp's llama-batched-bench: 110m Q8_0
# and the default model, 1/2/4/8/16 sequences, then the 16-sequence cell REPS times
# alternating, as a markdown table (docs/BENCHMARKS.md).
#
#   bash bench/peer.sh                 # once: builds build/peer/gcc and build/peer/ik
#   bash bench/batched.sh              # both models, 2 threads, 3 passes at 16
#   bash bench/batched.sh --models llama:110m:q8_0 --reps 5
#   bash bench/batched.sh --isa avx2   # the peers' AVX2 builds (peer.sh --isa avx2) against TIERSERVE_ISA=avx2
#
# Options are those of bench/batched.py (--help).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$ROOT/.venv/bin/python
[[ -x $PY ]] || PY=python3
exec "$PY" "$ROOT/bench/batched.py" "$@"
