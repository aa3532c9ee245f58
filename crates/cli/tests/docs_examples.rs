//! Every `mantle ...` command in the README and in docs/ must run as written. This test pulls
//! the lines that start with `mantle ` out of the ```sh code blocks, runs each with the
//! freshly built binary first on the PATH (from the repository root, in document order) and
//! fails on a non-zero exit. Blocks tagged otherwise (```console, ```text) are not run;
//! `mantle serve` (runs until stopped) is covered by the server's own tests instead.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `mantle` command lines of the ```sh blocks of `text`, with their line numbers;
/// backslash continuations are joined.
fn commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_sh = !in_sh && (info == "sh" || info == "bash");
            continue;
        }
        if !in_sh {
            continue;
        }
        let (start, mut cmd) = pending.take().unwrap_or((i + 1, String::new()));
        cmd.push_str(trimmed.trim_end_matches('\\').trim_end());
        if trimmed.ends_with('\\') {
            cmd.push(' ');
            pending = Some((start, cmd));
            continue;
        }
        let cmd = cmd.split(" #").next().unwrap_or("").trim().to_string();
        if cmd.starts_with("mantle ") && !cmd.starts_with("mantle serve") {
            out.push((start, cmd));
        }
    }
    out
}

#[test]
fn every_documented_mantle_command_runs() {
    let root = repo_root();
    let shared = root.join("../shared/traces");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_mantle"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut docs = vec![root.join("README.md")];
    let mut entries: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    entries.sort();
    docs.extend(entries);

    let mut ran = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for (line, cmd) in commands(&text) {
            if cmd.contains("../shared/traces") && !shared.is_dir() {
                eprintln!(
                    "skipping {}:{line}: ../shared/traces is absent",
                    doc.display()
                );
                continue;
            }
            let output = Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .current_dir(&root)
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{}:{line}: `{cmd}` failed ({}):\n{}",
                doc.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} documented commands found");
    eprintln!("{ran} documented commands ran");
}

#[test]
fn extraction_joins_continuations_and_ignores_other_blocks() {
    let text = "```sh\nmantle a \\\n  --b c  # note\necho x\n```\n```text\nmantle no\n```\n";
    assert_eq!(commands(text), vec![(2, "mantle a --b c".to_string())]);
}
