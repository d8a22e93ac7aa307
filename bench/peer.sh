#!/usr/bin/env bash
# Builds the llama.cpp peer for the side-by-side benchmark (bench/compare.sh): the
# llama.cpp vendored in the pinned llama-cpp-python sdist (the same code as the oracle of
# tests/oracle_logits_test.cc), with -DGGML_NATIVE=ON, in two variants:
#   build/peer/gcc    Debian 12's GCC 12, with the AMX tile-config fix below
#   build/peer/clang  clang 14
# and the second peer, ik_llama.cpp (the fork that leads llama.cpp on x86 CPUs: rows
# interleaved and weights repacked at load, its own GEMM and flash-attention kernels), from
# the sdist of the pinned ik-llama-cpp-python, also with -DGGML_NATIVE=ON:
#   build/peer/ik     GCC 12; run with its best CPU settings, run-time repack (-rtr 1)
#                     and flash attention (-fa 1) (bench/compare.py, bench/batched.py)
# and reports for each whether it has llama.cpp's AMX path and whether it runs a
# quantized model.
#
# The AMX fix: GCC 12 does not see that `ldtilecfg` reads the tile config that
# ggml_tile_config_init() builds on the stack, so it drops the stores into it (only the
# zeroing survives) and the next tile instruction faults (SIGILL on every quantized model;
# upstream: ggml-org/llama.cpp PR #26954, which moves the config to .rodata and also
# requests XTILEDATA per thread). We add one compiler barrier that takes the config's
# address, so the stores must happen before it. The script checks that on a code snippet
# (GCC 12 output with and without the barrier) even on CPUs without AMX.
#
# Usage: bench/peer.sh [--variants "gcc clang ik"] [--isa avx2] [--jobs N] [--model FILE.gguf] [--with-server]
#   --isa avx2  build for AVX2 instead of -march=native (GGML_NATIVE=OFF with AVX, AVX2, FMA,
#             F16C and BMI2 on, AVX-512 and AVX-VNNI off: what an AVX2-only CPU such as Zen 3
#             gets) into build/peer/<variant>-avx2; bench/compare.sh --isa avx2 runs these
#             against tierserve's AVX2 kernels (TIERSERVE_ISA=avx2), so an AVX-512 machine
#             measures the AVX2 paths of all three engines
#   --model   a GGUF to smoke-test both builds with (default: a tiny q8_0 from make-model
#             when $TIERSERVE, default build/bin/tierserve, exists)
#   --with-server  also build llama-server (for `tierserve bench --compare-url`), without
#             its web UI (LLAMA_USE_PREBUILT_UI=OFF: nothing is downloaded)
#   --server-only  build only llama-server, with GCC (build/peer/gcc/bin/llama-server: the
#             gateway's tests run it as a worker), and skip the report
# Environment: PEER_PIN (llama-cpp-python version, default 0.3.36), PEER_IK_PIN
# (ik-llama-cpp-python version, default 0.1.5), PEER_DIR (default build/peer), PIP
# (default .venv/bin/pip, else python3 -m pip).
# Nothing is fetched once build/peer/sdist holds the sdists.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PIN=${PEER_PIN:-0.3.36}
IK_PIN=${PEER_IK_PIN:-0.1.5}
PEER_DIR=${PEER_DIR:-$ROOT/build/peer}
VARIANTS="gcc clang ik"
JOBS=$(nproc)
MODEL=""
TARGETS=(llama-bench llama-batched-bench llama-completion)
SERVER=OFF
SERVER_ONLY=0
ISA=native

while [[ $# -gt 0 ]]; do
  case "$1" in
    --variants) VARIANTS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --with-server) SERVER=ON; TARGETS+=(llama-server); shift ;;
    --server-only) SERVER=ON; TARGETS=(llama-server); VARIANTS=gcc; SERVER_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { printf '[peer %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

case $ISA in
  native) ISA_SUFFIX=""; ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) ISA_SUFFIX="-avx2"
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                   -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
                   -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  *) echo "peer.sh: --isa is native or avx2, not $ISA" >&2; exit 2 ;;
esac
[[ $SERVER_ONLY == 1 && $ISA != native ]] && { echo "peer.sh: --server-only builds the native llama-server only" >&2; exit 2; }

# --- 1. the pinned sources ------------------------------------------------------------
# fetch_sdist PACKAGE VERSION DIST_NAME VENDOR_DIR: the vendored tree of the package's sdist.
fetch_sdist() {
  local pkg=$1 ver=$2 dist=$3 vendor=$4
  local sdist=$PEER_DIR/sdist/$dist-$ver.tar.gz
  if [[ ! -f $sdist ]]; then
    if [[ -x $ROOT/.venv/bin/pip ]]; then PIP_CMD=("$ROOT/.venv/bin/pip"); else PIP_CMD=(python3 -m pip); fi
    [[ -n ${PIP:-} ]] && PIP_CMD=("$PIP")
    log "downloading the $pkg==$ver sdist (pip download --no-binary :all:)"
    mkdir -p "$PEER_DIR/sdist"
    "${PIP_CMD[@]}" download --no-binary :all: --no-deps "$pkg==$ver" -d "$PEER_DIR/sdist" >&2
  fi
  local src=$PEER_DIR/src/$dist-$ver/vendor/$vendor
  if [[ ! -f $src/CMakeLists.txt ]]; then
    log "extracting $sdist"
    mkdir -p "$PEER_DIR/src"
    tar -xzf "$sdist" -C "$PEER_DIR/src"
  fi
  echo "$src"
}
SRC=$(fetch_sdist llama-cpp-python "$PIN" llama_cpp_python llama.cpp)
IK_SRC=""
if [[ " $VARIANTS " == *" ik "* ]]; then
  IK_SRC=$(fetch_sdist ik-llama-cpp-python "$IK_PIN" ik_llama_cpp_python ik_llama.cpp)
  # The sdist has common/build-info.cpp.in but not common/cmake/build-info-gen-cpp.cmake,
  # the script the build runs to write common/build-info.cpp (from git, upstream): supply
  # one that fills the template with the pinned version instead.
  GEN=$IK_SRC/common/cmake/build-info-gen-cpp.cmake
  if [[ ! -f $GEN ]]; then
    mkdir -p "$(dirname "$GEN")"
    cat >"$GEN" <<EOF
# Written by tierserve's bench/peer.sh: the ik-llama-cpp-python sdist does not ship this.
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "ik-llama-cpp-python-$IK_PIN")
set(BUILD_COMPILER "\${CMAKE_C_COMPILER_ID} \${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "$(gcc -dumpmachine)")
configure_file("\${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in" "\${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp")
EOF
    log "wrote $GEN"
  fi
fi

# --- 2. the AMX tile-config barrier (idempotent) -------------------------------------
MMQ=$SRC/ggml/src/ggml-cpu/amx/mmq.cpp
MARK="tierserve bench/peer.sh: keep the tile config stores (GCC 12)"
python3 - "$MMQ" "$MARK" <<'EOF'
import re, sys
path, mark = sys.argv[1], sys.argv[2]
src = open(path).read()
if mark in src:
    print(f"[peer] AMX barrier already in {path}", file=sys.stderr)
    sys.exit(0)
# The one _tile_loadconfig(&tc) inside ggml_tile_config_init().
start = src.index("inline void ggml_tile_config_init(void)")
end = src.index("\n}\n", start)
body = src[start:end]
hits = [m.start() for m in re.finditer(r"\n(\s*)_tile_loadconfig\(&tc\);", body)]
if len(hits) != 1:
    sys.exit(f"peer.sh: expected one _tile_loadconfig(&tc) in ggml_tile_config_init, found {len(hits)}")
indent = re.match(r"\n(\s*)", body[hits[0]:]).group(1)
line = f'\n{indent}asm volatile("" : : "r"(&tc) : "memory");  // {mark}'
body = body[:hits[0]] + line + body[hits[0]:]
open(path, "w").write(src[:start] + body + src[end:])
print(f"[peer] AMX barrier added to {path}", file=sys.stderr)
EOF

# Shows the miscompile and the fix on the same function, compiled for AMX (no AMX CPU
# needed): counts the stores into the config before ldtilecfg.
amx_codegen_check() {
  local cxx=$1 dir=$PEER_DIR/amx-codegen
  mkdir -p "$dir"
  cat > "$dir/tilecfg.cpp" <<'EOF'
#include <immintrin.h>
#include <cstdint>
struct tile_config_t { uint8_t palette_id = 0; uint8_t start_row = 0; uint8_t reserved_0[14] = {0};
                       uint16_t colsb[16] = {0}; uint8_t rows[16] = {0}; };
void init() {
  alignas(64) tile_config_t tc = {};
  tc.palette_id = 1;
  tc.rows[0] = 8;  tc.colsb[0] = 64;  tc.rows[2] = 16; tc.colsb[2] = 32;
  tc.rows[4] = 16; tc.colsb[4] = 64;  tc.rows[7] = 16; tc.colsb[7] = 64;
#ifdef BARRIER
  asm volatile("" : : "r"(&tc) : "memory");
#endif
  _tile_loadconfig(&tc);
}
EOF
  local out=""
  for b in "" -DBARRIER; do
    local n
    n=$("$cxx" -O2 -mamx-tile -mamx-int8 -mavx512f $b -S -o - "$dir/tilecfg.cpp" 2>/dev/null |
        awk '/ldtilecfg/ {exit} /^[ \t]+mov[bwlq]?[ \t].*\(%rsp\)/ {n++} END {print n+0}') || n="?"
    out+="${b:-no barrier}: $n store instructions; "
  done
  echo "${out%; }"
}

# --- 3. build ------------------------------------------------------------------------
build_variant() {
  local v=$1 cc cxx src=$SRC targets=("${TARGETS[@]}") examples=OFF
  case "$v" in
    gcc) cc=gcc; cxx=g++ ;;
    clang) cc=clang-14; cxx=clang++-14
           command -v clang-14 >/dev/null || { cc=clang; cxx=clang++; } ;;
    ik) cc=gcc; cxx=g++; src=$IK_SRC; examples=ON  # its llama-bench and batched-bench are examples
        targets=(); for t in "${TARGETS[@]}"; do [[ $t == llama-completion ]] && t=llama-cli; targets+=("$t"); done ;;
    *) echo "peer.sh: unknown variant $v" >&2; exit 2 ;;
  esac
  local dir=$PEER_DIR/$v$ISA_SUFFIX
  log "$v$ISA_SUFFIX: configuring ($($cxx --version | head -1)) in $dir"
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    "${ISA_FLAGS[@]}" -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=$examples -DLLAMA_BUILD_SERVER=$SERVER \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF >"$dir.configure.log" 2>&1 ||
    { tail -30 "$dir.configure.log" >&2; exit 1; }
  log "$v$ISA_SUFFIX: building ${targets[*]} with $JOBS jobs (log: $dir.build.log)"
  # Ninja's [n/N] lines, thinned to one every 25 steps, as progress.
  set +e
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" 2>&1 | tee "$dir.build.log" |
    awk '/^\[[0-9]+\/[0-9]+\]/ { if (++n % 25 == 0) { split($1, a, /[\[\/\]]/); printf "[peer] %s: step %s of %s\n", v, a[2], a[3] > "/dev/stderr" } }' v="$v"
  local rc=${PIPESTATUS[0]}
  set -e
  if [[ $rc -ne 0 ]]; then grep -E "error|FAILED" "$dir.build.log" | head -20 >&2; exit 1; fi
  log "$v$ISA_SUFFIX: built"
}

if [[ $SERVER_ONLY == 1 ]]; then
  if [[ -x $PEER_DIR/gcc/bin/llama-server && $PEER_DIR/gcc/bin/llama-server -nt $SRC/CMakeLists.txt ]]; then
    log "llama-server up to date: $PEER_DIR/gcc/bin/llama-server"
  else
    build_variant gcc
  fi
  echo "$PEER_DIR/gcc/bin/llama-server"
  exit 0
fi

# --- 4. report -----------------------------------------------------------------------
cpu_amx=$(grep -m1 -o -w -E 'amx_(tile|int8)' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)
cpu_name=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')

TIERSERVE=${TIERSERVE:-$ROOT/build/bin/tierserve}
if [[ -z $MODEL && -x $TIERSERVE ]]; then
  MODEL=$PEER_DIR/smoke-llama-tiny-q8_0.gguf
  [[ -f $MODEL ]] || "$TIERSERVE" make-model --arch llama --shape tiny --type q8_0 -o "$MODEL" 2>/dev/null || MODEL=""
fi

REPORT=$PEER_DIR/peer-report$ISA_SUFFIX.md
{
  echo "# Peer builds: llama.cpp (llama-cpp-python==$PIN, vendor/llama.cpp)$([[ -n $IK_SRC ]] && echo ", ik_llama.cpp (ik-llama-cpp-python==$IK_PIN, vendor/ik_llama.cpp)")"
  echo
  echo "- CPU: $cpu_name; AMX in /proc/cpuinfo: ${cpu_amx:-none}"
  echo "- patch: \`$MARK\` in ggml/src/ggml-cpu/amx/mmq.cpp"
  echo
  echo "| build | compiler | -march=native has AMX-INT8 | AMX_INT8 in system_info | AMX buffers | tile-config codegen | smoke test |"
  echo "|---|---|---|---|---|---|---|"
} >"$REPORT"

for v in $VARIANTS; do
  build_variant "$v"
  dir=$PEER_DIR/$v$ISA_SUFFIX
  cxx=$(grep -m1 '^CMAKE_CXX_COMPILER:' "$dir/CMakeCache.txt" | cut -d= -f2)
  native_amx=$("$cxx" -march=native -dM -E -x c++ /dev/null | grep -c '__AMX_INT8__' || true)
  codegen=$(amx_codegen_check "$cxx")
  sysinfo="(no model)"; amxbuf="(no model)"; smoke="(no model)"
  if [[ -n $MODEL ]]; then
    set +e
    if [[ $v == ik ]]; then
      # (in its build directory: its llama-cli writes main.log and llama.log where it runs)
      (cd "$dir" && "$dir/bin/llama-cli" -m "$(realpath "$MODEL")" -p "Once upon a time" -n 4 -t 2 -rtr --no-warmup \
        </dev/null >"$dir.smoke.log" 2>&1)
    else
      "$dir/bin/llama-completion" -m "$MODEL" -p "Once upon a time" -n 4 -no-cnv -t 2 --no-warmup \
        </dev/null >"$dir.smoke.log" 2>&1
    fi
    rc=$?
    set -e
    if grep -q 'AMX_INT8 = 1' "$dir.smoke.log"; then sysinfo=yes; else sysinfo=no; fi
    if grep -qi 'AMX.*buffer' "$dir.smoke.log"; then amxbuf=yes; else amxbuf=no; fi
    case $rc in
      0) smoke="ok ($([[ $v == ik ]] && echo llama-cli || echo llama-completion), q8_0)" ;;
      132) smoke="SIGILL" ;;
      *) smoke="exit $rc (see $dir.smoke.log)" ;;
    esac
  fi
  echo "| $v$ISA_SUFFIX | $("$cxx" --version | head -1) | $([[ $native_amx -gt 0 ]] && echo yes || echo no) | $sysinfo | $amxbuf | $codegen | $smoke |" >>"$REPORT"
done

if [[ -z $cpu_amx ]]; then
  cat >>"$REPORT" <<EOF

This CPU has no AMX, so -march=native does not enable llama.cpp's AMX code in either build:
the barrier is applied but inert here, and the peer runs its AVX-512 (VNNI) paths. The
codegen column (store instructions into the config before ldtilecfg) shows the miscompile: GCC 12
keeps only palette_id = 1 without the barrier (rows and colsb are lost), all of them with it.
EOF
fi
cat "$REPORT"
log "report: $REPORT"
