#!/usr/bin/env bash
# Installs the Debian 12 packages tierserve builds and tests with. Idempotent: re-running
# only refreshes the package lists. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libboost1.81-dev libyaml-cpp-dev libhiredis-dev libsqlite3-dev
  redis-server
  chromium
  clang libclang-rt-14-dev
  python3 python3-venv python3-pip
  shellcheck systemd
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[deps] all Debian packages present"
fi
