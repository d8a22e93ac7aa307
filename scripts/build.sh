#!/usr/bin/env bash
# Configures and builds tierserve (Release) into build/. Usage: scripts/build.sh [targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
echo "[build] building in $BUILD_DIR with -j$JOBS"
if [ $# -gt 0 ]; then
  cmake --build "$BUILD_DIR" -j"$JOBS" --target "$@"
else
  cmake --build "$BUILD_DIR" -j"$JOBS"
fi
