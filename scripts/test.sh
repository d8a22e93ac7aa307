#!/usr/bin/env bash
# Sets up everything the test suite needs and runs it: Debian packages, a Release build,
# the default model, every CTest test, then the GGUF parser fuzzer for a bounded time (FUZZ_SECONDS, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
# The default model's golden tests need the model: install it, and fail (not skip) without it.
bash scripts/setup-model.sh > /dev/null
export TIERSERVE_REQUIRE_DEFAULT_MODEL=1
echo "[test] running ctest"
ctest --test-dir build --output-on-failure -j2 --timeout 900
echo "[test] fuzzing the GGUF reader for ${FUZZ_SECONDS:-60} s"
bash scripts/fuzz.sh
