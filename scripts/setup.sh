#!/usr/bin/env bash
# Installs what building and testing Mantle needs and is not already on the machine:
# Debian packages (RocksDB, clang for its bindings, zstd, Redis for the server tests, jq for
# scripts/eval-sizing.sh, etcd and protoc with the well-known protos for the cluster control
# plane, Debian's chromium for the dashboard's browser test). Needs a Rust toolchain (rustup,
# stable). Safe to run repeatedly; it only installs what is missing.
set -euo pipefail

packages=(build-essential pkg-config libclang-dev librocksdb-dev zstd redis-server redis-tools jq
  etcd-server protobuf-compiler libprotobuf-dev chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found; install one with rustup (stable, with rustfmt and clippy)" >&2
  exit 1
fi

# The Python package (crates/python): a virtual environment of the clone's own, .venv
# (MANTLE_VENV overrides), with maturin to build the wheel and what its tests and docs use.
venv="${MANTLE_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the Python environment $venv" >&2
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import maturin, pytest, pandas, matplotlib' 2>/dev/null; then
  echo "setup: installing maturin, pytest, pandas and matplotlib into $venv" >&2
  "$venv/bin/pip" install -q "maturin>=1.16,<2" pytest pandas matplotlib
fi
