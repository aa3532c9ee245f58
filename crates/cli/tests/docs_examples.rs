//! The README and every page in docs/ must run as written. For each page, in document order:
//!
//! - every ```sh (or ```bash) block runs as one script (`sh -e`), so a failing command fails
//!   the block and the test names the page, the line and the command;
//! - every ```console or ```text block that is a transcript (lines starting with `$ `) whose
//!   commands are all `mantle` commands that need no server (not `mantle serve`, which runs
//!   until stopped, nor a command given `--server`) runs too, and the output it shows must appear in the real output, in order: whitespace is
//!   ignored and `...` stands for anything. A transcript that shows an error line
//!   (`mantle: ...`) expects a non-zero exit.
//!
//! A block that cannot run in CI is marked on the line before its fence with
//! `<!-- docs-test: skip: REASON -->` (a server that runs until stopped, a nightly toolchain,
//! a long benchmark...); the reason is printed. Blocks that use `../shared/traces` are skipped
//! with a message when the traces are absent (`shared/` is looked for beside the repository,
//! as in CI, and beside the directory holding it, as in a worktree under `wt/`).
//!
//! Everything runs in a scratch copy of the repository (its top-level entries linked, `docs/`
//! copied so regenerated charts land in the copy, `../shared` linked beside it) with the
//! freshly built binary first on the PATH and as `target/release/mantle`; `/tmp/` in a
//! command is rewritten to the scratch directory's own `tmp/`, so concurrent runs and the
//! machine's /tmp stay apart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Safety bound on one block (`timeout` kills the whole process group).
const BLOCK_TIMEOUT: Duration = Duration::from_secs(300);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[derive(Debug, PartialEq)]
enum Kind {
    /// ```sh: commands with their line numbers.
    Script(Vec<(usize, String)>),
    /// A `$ ` transcript: each command with its line and the output lines shown after it.
    Transcript(Vec<(usize, String, Vec<String>)>),
}

#[derive(Debug, PartialEq)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    kind: Kind,
    /// The reason given by a `<!-- docs-test: skip: REASON -->` line before the fence.
    skip: Option<String>,
    text: String,
}

const MARKER: &str = "<!-- docs-test:";

/// Logical lines (backslash continuations joined) with their first line's number; comments
/// and blank lines dropped.
fn logical_lines(lines: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for &(n, line) in lines {
        let trimmed = line.trim();
        let (start, mut cmd) = pending.take().unwrap_or((n, String::new()));
        if cmd.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        cmd.push_str(trimmed.trim_end_matches('\\').trim_end());
        if trimmed.ends_with('\\') {
            cmd.push(' ');
            pending = Some((start, cmd));
            continue;
        }
        out.push((start, cmd));
    }
    out
}

/// The runnable blocks of a Markdown page.
fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let info = info.trim().to_string();
        let open = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push((i + 1, lines[i]));
            i += 1;
        }
        i += 1;
        let skip = lines[..open]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix(MARKER))
            .map(|rest| {
                let rest = rest.trim().trim_end_matches("-->").trim();
                rest.strip_prefix("skip:")
                    .unwrap_or_else(|| panic!("line {open}: unknown docs-test marker `{rest}`"))
                    .trim()
                    .to_string()
            });
        let text = body.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n");
        let kind = match info.split_whitespace().next().unwrap_or("") {
            "sh" | "bash" => Kind::Script(logical_lines(&body)),
            "console" | "text" if body.iter().any(|(_, l)| l.starts_with("$ ")) => {
                Kind::Transcript(transcript(&body))
            }
            _ => continue,
        };
        out.push(Block {
            line: open + 1,
            kind,
            skip,
            text,
        });
    }
    out
}

fn transcript(body: &[(usize, &str)]) -> Vec<(usize, String, Vec<String>)> {
    let mut out: Vec<(usize, String, Vec<String>)> = Vec::new();
    let mut continuing = false;
    for &(n, line) in body {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push((n, cmd.trim_end_matches('\\').trim().to_string(), Vec::new()));
            continuing = line.trim_end().ends_with('\\');
        } else if continuing {
            let last = out.last_mut().unwrap();
            last.1.push(' ');
            last.1.push_str(line.trim().trim_end_matches('\\').trim());
            continuing = line.trim_end().ends_with('\\');
        } else if let Some(last) = out.last_mut() {
            last.2.push(line.to_string());
        }
    }
    for (_, cmd, _) in &mut out {
        *cmd = cmd.split(" # ").next().unwrap_or("").trim().to_string();
    }
    out
}

/// Whether `shown` (output lines from the doc) appears in `actual`, in order, ignoring
/// whitespace, with `...` matching anything. Returns the first line that does not.
fn missing_output<'a>(shown: &'a [String], actual: &str) -> Option<&'a str> {
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let actual = squeeze(actual);
    let mut at = 0;
    for line in shown {
        for part in line.split("...") {
            let part = squeeze(part);
            if part.is_empty() {
                continue;
            }
            match actual[at..].find(&part) {
                Some(i) => at += i + part.len(),
                None => return Some(line),
            }
        }
    }
    None
}

/// `/tmp/` → the scratch directory's `tmp/`, where it starts a path.
fn private_tmp(cmd: &str, tmp: &Path) -> String {
    let mut out = String::new();
    let mut rest = cmd;
    while let Some(i) = rest.find("/tmp/") {
        let starts_path = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || "='\"=:".contains(c));
        out.push_str(&rest[..i]);
        if starts_path {
            out.push_str(&format!("{}/", tmp.display()));
        } else {
            out.push_str("/tmp/");
        }
        rest = &rest[i + "/tmp/".len()..];
    }
    out.push_str(rest);
    out
}

/// The `shared/` directory with the real traces, if there is one.
fn shared(root: &Path) -> Option<PathBuf> {
    ["../shared", "../../shared"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.join("traces").is_dir())
}

/// A scratch repository: top-level entries linked, docs/ copied, ../shared linked, the
/// binary at target/release/mantle.
struct Sandbox {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    tmp: PathBuf,
    path: String,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn sandbox(root: &Path) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == ".git" || name == "docs" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), repo.join(&name)).unwrap();
    }
    copy_dir(&root.join("docs"), &repo.join("docs"));
    if let Some(shared) = shared(root) {
        std::os::unix::fs::symlink(&shared, dir.path().join("shared")).unwrap();
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mantle"));
    let release = repo.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(&bin, release.join("mantle")).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Sandbox {
        _dir: dir,
        repo,
        tmp,
        path,
    }
}

/// Runs `script` with `sh -e` in the sandbox; `(success, stdout + stderr)`.
fn run(sb: &Sandbox, script: &str) -> (bool, String) {
    let output = Command::new("timeout")
        .arg("--kill-after=5")
        .arg(BLOCK_TIMEOUT.as_secs().to_string())
        .args(["sh", "-e", "-c", script])
        .current_dir(&sb.repo)
        .env("PATH", &sb.path)
        .env("TMPDIR", &sb.tmp)
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The README and every page of docs/, README first.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

#[test]
fn every_documented_command_runs_and_prints_what_the_docs_show() {
    let root = repo_root();
    let have_traces = shared(&root).is_some();
    let sb = sandbox(&root);
    let mut failures = Vec::new();
    let (mut scripts, mut transcripts) = (0, 0);
    let started = Instant::now();
    for page in pages(&root) {
        let name = page.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&page).unwrap();
        for block in blocks(&text) {
            let at = format!("{name}:{}", block.line);
            if let Some(reason) = &block.skip {
                assert!(!reason.is_empty(), "{at}: a skipped block must say why");
                eprintln!("not run {at}: {reason}");
                continue;
            }
            if block.text.contains("../shared/traces") && !have_traces {
                eprintln!("skipping {at}: ../shared/traces is absent");
                continue;
            }
            match &block.kind {
                Kind::Script(lines) => {
                    // Echo a marker before each command so a failure names its line.
                    let script: String = lines
                        .iter()
                        .map(|(n, cmd)| {
                            format!("echo '@@line {n}' >&2\n{}\n", private_tmp(cmd, &sb.tmp))
                        })
                        .collect();
                    let t = Instant::now();
                    let (ok, out) = run(&sb, &script);
                    eprintln!("ran {at} ({:.1} s)", t.elapsed().as_secs_f64());
                    scripts += 1;
                    if !ok {
                        let line = out
                            .lines()
                            .rev()
                            .find_map(|l| l.strip_prefix("@@line "))
                            .and_then(|n| n.parse::<usize>().ok());
                        let cmd = lines
                            .iter()
                            .find(|(n, _)| Some(*n) == line)
                            .map_or("?", |(_, c)| c.as_str());
                        failures.push(format!(
                            "{name}:{}: `{cmd}` failed (block at line {}; mark the block \
                             `{MARKER} skip: REASON -->` if it cannot run in CI):\n{}",
                            line.unwrap_or(block.line),
                            block.line,
                            tail(&out)
                        ));
                    }
                }
                Kind::Transcript(steps) => {
                    let runnable = steps.iter().all(|(_, cmd, _)| {
                        cmd.starts_with("mantle ")
                            && !cmd.starts_with("mantle serve")
                            && !cmd.contains(" --server ")
                            && !cmd.ends_with('&')
                    });
                    if !runnable {
                        continue;
                    }
                    for (line, cmd, shown) in steps {
                        let t = Instant::now();
                        let (ok, out) = run(&sb, &private_tmp(cmd, &sb.tmp));
                        eprintln!("ran {name}:{line} ({:.1} s)", t.elapsed().as_secs_f64());
                        transcripts += 1;
                        let shows_error = shown.iter().any(|l| l.starts_with("mantle: "));
                        if ok == shows_error {
                            failures.push(format!(
                                "{name}:{line}: `{cmd}` {} but the doc shows {}:\n{}",
                                if ok { "succeeded" } else { "failed" },
                                if shows_error { "an error" } else { "success" },
                                tail(&out)
                            ));
                        } else if let Some(missing) = missing_output(shown, &out) {
                            failures.push(format!(
                                "{name}:{line}: `{cmd}` did not print the documented line \
                                 `{missing}`; it printed:\n{}",
                                tail(&out)
                            ));
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "{scripts} blocks and {transcripts} transcript commands ran in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} documented command(s) do not match the program:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(scripts >= 10, "only {scripts} documented blocks found");
}

#[test]
fn blocks_are_extracted_with_lines_markers_and_continuations() {
    let text = "intro\n```sh\nmantle a \\\n  --b c\n# note\necho x\n```\n\
                ```text\nno prompt here\n```\n\
                <!-- docs-test: skip: runs forever -->\n```sh\nmantle serve\n```\n\
                ```console\n$ mantle x \\\n    --y\nout 1\n...\n$ mantle z # why\n```\n";
    let b = blocks(text);
    assert_eq!(b.len(), 3);
    assert_eq!(b[0].line, 2);
    assert_eq!(
        b[0].kind,
        Kind::Script(vec![
            (3, "mantle a --b c".to_string()),
            (6, "echo x".to_string())
        ])
    );
    assert_eq!(b[0].skip, None);
    assert_eq!(b[1].skip.as_deref(), Some("runs forever"));
    assert_eq!(
        b[2].kind,
        Kind::Transcript(vec![
            (
                16,
                "mantle x --y".to_string(),
                vec!["out 1".to_string(), "...".to_string()]
            ),
            (20, "mantle z".to_string(), vec![]),
        ])
    );
}

#[test]
fn shown_output_matches_in_order_ignoring_whitespace() {
    let shown = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let actual = "{\n  \"a\": 1,\n  \"b\": [2, 3]\n}\nrequests 100 (x)\n";
    assert_eq!(
        missing_output(&shown(&["{ \"a\": 1, \"b\": [2,3] }"]), actual),
        None
    );
    assert_eq!(missing_output(&shown(&["requests ... (x)"]), actual), None);
    assert_eq!(
        missing_output(&shown(&["requests 101"]), actual),
        Some("requests 101")
    );
    assert_eq!(
        missing_output(&shown(&["requests", "\"a\""]), actual),
        Some("\"a\""),
        "in order"
    );
    let tmp = Path::new("/s/tmp");
    assert_eq!(
        private_tmp("a -o /tmp/x --r=/tmp/y b/tmp/z", tmp),
        "a -o /s/tmp/x --r=/s/tmp/y b/tmp/z"
    );
}
