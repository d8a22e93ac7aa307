#!/usr/bin/env bash
# Sets up everything the test suite needs and runs it: Debian packages, a Release build,
# the default models, the Python environment (openai SDK), llama-server built from the
# pinned llama.cpp, every CTest test (twice: the
# second time with the AMX kernels emulated), then the GGUF, request and HTTP-framing
# fuzzers for a bounded time each and the gateway's upstream client under ASan
# (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
# The default model's golden tests need the model: install it, and fail (not skip) without it.
bash scripts/setup-model.sh > /dev/null
bash scripts/python-env.sh
# llama.cpp's server from the pinned source: a worker kind the gateway's tests run.
bash bench/peer.sh --server-only --jobs "${JOBS:-2}" > /dev/null
# In CI nothing optional may be skipped: the default models, the openai SDK, headless
# Chromium, llama-server, redis-server and Envoy (the tests start their own, on loopback).
export TIERSERVE_REQUIRE_DEFAULT_MODEL=1 TIERSERVE_REQUIRE_OPENAI=1 TIERSERVE_REQUIRE_CHROMIUM=1 TIERSERVE_REQUIRE_LLAMA_SERVER=1
export TIERSERVE_REQUIRE_REDIS=1 TIERSERVE_REQUIRE_ENVOY=1
# kubectl renders deploy/k8s offline (tests/k8s_test.py). It is on the project's machines;
# Debian's archive has no kubectl: elsewhere install it from pkgs.k8s.io first.
export TIERSERVE_REQUIRE_KUBECTL=1
echo "[test] running ctest"
ctest --test-dir build --output-on-failure -j2 --timeout 900
# The machines this runs on have no AMX: the whole suite again with the AMX kernels' tile
# instructions executed in software, as an AMX CPU would run it (bit-identical results
# expected everywhere; about 100 s on 2 cores).
echo "[test] running ctest with TIERSERVE_ISA=amx-emulated"
TIERSERVE_ISA=amx-emulated ctest --test-dir build --output-on-failure -j2 --timeout 900
echo "[test] fuzzing the GGUF reader, the request parser and the HTTP framing; the upstream client under ASan"
bash scripts/fuzz.sh
