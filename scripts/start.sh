#!/usr/bin/env bash
# The main job: installs what tierserve needs (Debian packages, a Release build, a model)
# and runs it. Extra arguments go to `tierserve run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh tierserve
MODEL=build/models/llama-15m-q8_0.gguf
if [ ! -f "$MODEL" ]; then
  mkdir -p build/models
  echo "[start] writing a random-weight llama 15m model to $MODEL"
  build/bin/tierserve make-model --arch llama --shape 15m --type q8_0 -o "$MODEL"
fi
exec build/bin/tierserve run -m "$MODEL" -p "Once upon a time" -n 64 "$@"
