#!/usr/bin/env bash
# The whole test suite: installs what is missing, then formatting, lints and every test
# (unit, integration against the real binary and server, agreement with libCacheSim's
# recorded results). Tests and binary share the release profile so it is built once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh

# Test binaries compile in the checkout's path (`env!("CARGO_MANIFEST_DIR")`, to find fixtures
# and policies), yet cargo deems them fresh in another checkout that shares the target
# directory; they then look for files under the first checkout's path. Rebuild those when
# the target directory was last tested from elsewhere.
built_from="$CARGO_TARGET_DIR/.tested-from"
if [ -f "$built_from" ] && [ "$(cat "$built_from")" != "$PWD" ]; then
  echo "test.sh: $CARGO_TARGET_DIR was last tested from $(cat "$built_from"); rebuilding" \
    "the tests that compile in their checkout's path" >&2
  grep -rl --include='*.rs' 'CARGO_MANIFEST_DIR' crates | xargs -r touch
fi
mkdir -p "$CARGO_TARGET_DIR"
echo "$PWD" > "$built_from"

cargo fmt --all --check
cargo build --release --workspace --locked
cargo clippy --release --workspace --all-targets --locked -- -D warnings
# --no-fail-fast: one run shows every failing test binary, not just the first.
cargo test --release --workspace --locked --no-fail-fast

# The Python package: its abi3 wheel built (release, same target directory) into the venv
# scripts/setup.sh made, then its pytest suite against the binary built above.
venv="${MANTLE_VENV:-$PWD/.venv}"
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --release --locked -q \
  -m crates/python/Cargo.toml
MANTLE_BIN="$MANTLE" "$venv/bin/python" -m pytest -q crates/python/tests
