#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan in build-fuzz/ and fuzzes the
# GGUF reader for a bounded time. Exits non-zero when the fuzzer finds a crash, a leak, a
# timeout or an allocation over the limit; the input is saved in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh                  # 60 s (FUZZ_SECONDS overrides), corpus kept between runs
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   FUZZ_JOBS=2 scripts/fuzz.sh      # parallel fuzzing processes (default 1)
#   scripts/fuzz.sh CRASH_FILE...    # re-run saved inputs once (reproduce a finding)
#
# The corpus: build-fuzz/corpus/gguf (new inputs land here) seeded from fuzz/seeds/ (small
# valid files from the Writer) and tests/data/gguf_bad/ (the crafted bad files).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_TO_RUN="${FUZZ_SECONDS:-60}"
JOBS="${FUZZ_JOBS:-1}"
CC_BIN="${CC:-clang}"
CXX_BIN="${CXX:-clang++}"

if ! command -v "$CXX_BIN" >/dev/null; then
  echo "fuzz.sh: $CXX_BIN not found (install clang and libclang-rt-dev)" >&2
  exit 2
fi
case "$("$CXX_BIN" --version)" in
  *clang*) ;;
  *) echo "fuzz.sh: CXX=$CXX_BIN is not clang; libFuzzer needs clang" >&2; exit 2 ;;
esac

# UBSan findings abort (and so count as crashes) instead of printing and going on.
SAN_FLAGS="-fno-sanitize-recover=all -fno-omit-frame-pointer -g"
cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$SAN_FLAGS" -DCMAKE_CXX_FLAGS="$SAN_FLAGS" \
  -DTIERSERVE_FUZZ=ON -DTIERSERVE_SANITIZE=ON -DTIERSERVE_TESTS=OFF -DTIERSERVE_BENCH=OFF >/dev/null
cmake --build "$BUILD" --target gguf_fuzz -j"${FUZZ_BUILD_JOBS:-2}"

FUZZER="$BUILD/fuzz/gguf_fuzz"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [[ $# -gt 0 ]]; then
  exec "$FUZZER" -malloc_limit_mb=512 -rss_limit_mb=2048 "$@"
fi

CORPUS="$BUILD/corpus/gguf"
ARTIFACTS="$BUILD/artifacts"
mkdir -p "$CORPUS" "$ARTIFACTS"

# -malloc_limit_mb: any single allocation above it is a finding (the reader must never
# reserve from an unchecked count). -timeout: seconds per input (a hang is a finding).
ARGS=(
  -max_total_time="$SECONDS_TO_RUN"
  -max_len=65536
  -timeout=10
  -rss_limit_mb=2048
  -malloc_limit_mb=512
  -dict="$ROOT/fuzz/gguf.dict"
  -artifact_prefix="$ARTIFACTS/"
  -print_final_stats=1
)
if [[ "$JOBS" -gt 1 ]]; then
  ARGS+=(-jobs="$JOBS" -workers="$JOBS")
fi

echo "fuzz.sh: fuzzing gguf_fuzz for ${SECONDS_TO_RUN}s (corpus $CORPUS)"
set +e
"$FUZZER" "${ARGS[@]}" "$CORPUS" "$ROOT/fuzz/seeds" "$ROOT/tests/data/gguf_bad"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz.sh: gguf_fuzz FAILED (exit $rc); inputs in $ARTIFACTS/:" >&2
  ls -l "$ARTIFACTS" >&2 || true
  exit "$rc"
fi
echo "fuzz.sh: no findings in ${SECONDS_TO_RUN}s"
