//! What the CLI integration tests share: running the built `mantle` from the repository
//! root and reading its JSON.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `mantle ARGS` in the repository root.
pub fn mantle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("mantle runs")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The one JSON object a successful run printed.
pub fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mantle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}
