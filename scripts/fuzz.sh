#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan in build-fuzz/ and fuzzes, each for
# a bounded time, the GGUF reader (gguf_fuzz), the OpenAI request parser of the server
# (request_fuzz) and the server's connection-level HTTP framing (http_fuzz: byte streams
# of several requests). Exits non-zero when a fuzzer finds a crash, a leak, a timeout or an
# allocation over the limit; the input is saved in build-fuzz/artifacts/. The same sanitized
# build runs one test that is not a fuzzer: the gateway's upstream client with its cancels
# racing pending reads (upstream_sanitized_test, target "upstream"), where a use-after-free
# reads as nothing in an optimized build but aborts under ASan.
#
#   scripts/fuzz.sh                  # GGUF 60 s (FUZZ_SECONDS), requests 30 s (REQUEST_FUZZ_SECONDS),
#                                    # HTTP streams 30 s (HTTP_FUZZ_SECONDS)
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   FUZZ_TARGETS=request scripts/fuzz.sh   # only one target (default: "gguf request http upstream")
#   FUZZ_JOBS=2 scripts/fuzz.sh      # parallel fuzzing processes (default 1)
#   scripts/fuzz.sh CRASH_FILE...    # re-run saved inputs once (FUZZ_TARGET=request|http for those)
#
# Corpora: build-fuzz/corpus/gguf (new inputs land here) seeded from fuzz/seeds/ (small
# valid files from the Writer) and tests/data/gguf_bad/ (the crafted bad files);
# build-fuzz/corpus/request seeded from fuzz/request_seeds/; build-fuzz/corpus/http from
# fuzz/http_seeds/ (each file's first byte picks how the rest is cut into reads).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_TO_RUN="${FUZZ_SECONDS:-60}"
REQUEST_SECONDS="${REQUEST_FUZZ_SECONDS:-30}"
HTTP_SECONDS="${HTTP_FUZZ_SECONDS:-30}"
TARGETS="${FUZZ_TARGETS:-gguf request http upstream}"
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
build_targets=()
for t in $TARGETS; do
  if [[ "$t" == upstream ]]; then build_targets+=(upstream_sanitized_test); else build_targets+=("${t}_fuzz"); fi
done
cmake --build "$BUILD" --target "${build_targets[@]}" -j"${FUZZ_BUILD_JOBS:-2}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [[ $# -gt 0 ]]; then
  exec "$BUILD/fuzz/${FUZZ_TARGET:-gguf}_fuzz" -malloc_limit_mb=512 -rss_limit_mb=2048 "$@"
fi

ARTIFACTS="$BUILD/artifacts"
mkdir -p "$ARTIFACTS"

# fuzz_one NAME SECONDS MAX_LEN DICT SEED_DIRS...
fuzz_one() {
  local name="$1" secs="$2" max_len="$3" dict="$4"
  shift 4
  local corpus="$BUILD/corpus/$name"
  mkdir -p "$corpus"
  # -malloc_limit_mb: any single allocation above it is a finding (a reader must never
  # reserve from an unchecked count). -timeout: seconds per input (a hang is a finding).
  local args=(
    -max_total_time="$secs"
    -max_len="$max_len"
    -timeout=10
    -rss_limit_mb=2048
    -malloc_limit_mb=512
    -dict="$dict"
    -artifact_prefix="$ARTIFACTS/${name}-"
    -print_final_stats=1
  )
  if [[ "$JOBS" -gt 1 ]]; then
    args+=(-jobs="$JOBS" -workers="$JOBS")
  fi
  echo "fuzz.sh: fuzzing ${name}_fuzz for ${secs}s (corpus $corpus)"
  set +e
  "$BUILD/fuzz/${name}_fuzz" "${args[@]}" "$corpus" "$@"
  local rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    echo "fuzz.sh: ${name}_fuzz FAILED (exit $rc); inputs in $ARTIFACTS/:" >&2
    ls -l "$ARTIFACTS" >&2 || true
    exit "$rc"
  fi
  echo "fuzz.sh: ${name}_fuzz: no findings in ${secs}s"
}

for t in $TARGETS; do
  case "$t" in
    gguf) fuzz_one gguf "$SECONDS_TO_RUN" 65536 "$ROOT/fuzz/gguf.dict" "$ROOT/fuzz/seeds" "$ROOT/tests/data/gguf_bad" ;;
    request) fuzz_one request "$REQUEST_SECONDS" 8192 "$ROOT/fuzz/request.dict" "$ROOT/fuzz/request_seeds" ;;
    http) fuzz_one http "$HTTP_SECONDS" 8192 "$ROOT/fuzz/http.dict" "$ROOT/fuzz/http_seeds" ;;
    upstream)
      echo "fuzz.sh: the gateway's upstream client under ASan and UBSan"
      "$BUILD/fuzz/upstream_sanitized_test" ;;
    *) echo "fuzz.sh: unknown target '$t' (gguf, request, http, upstream)" >&2; exit 2 ;;
  esac
done
