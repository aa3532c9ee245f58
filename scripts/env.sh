# Sourced by the scripts: one cargo target directory outside the clone, shared by the demo,
# the tests and the benchmarks, so a machine builds the release profile once.
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/mantle-target}"
MANTLE="$CARGO_TARGET_DIR/release/mantle"
