//! The crate diagram in docs/architecture.md is the workspace's dependency graph: every arrow
//! is a dependency in a Cargo.toml and every dependency between the workspace's crates is an
//! arrow (dev-dependencies aside), read from `cargo metadata`. A crate added, dropped or
//! rewired without the diagram fails here, naming the edges that differ.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

type Edges = BTreeSet<(String, String)>;

/// The short name a crate has in the diagram: its package name without `mantle-`.
fn short(package: &str) -> String {
    package.trim_start_matches("mantle-").to_string()
}

/// The edges of the first mermaid block after `heading`: `a --> b & c` is `a → b`, `a → c`.
fn diagram_edges(markdown: &str, heading: &str) -> Result<Edges, String> {
    let section = markdown
        .split_once(heading)
        .ok_or_else(|| format!("no '{heading}' heading"))?
        .1;
    let block = section
        .split_once("```mermaid")
        .and_then(|(_, rest)| rest.split_once("```"))
        .ok_or_else(|| format!("no mermaid block under '{heading}'"))?
        .0;
    let mut edges = Edges::new();
    for (number, line) in block.lines().enumerate() {
        let Some((from, to)) = line.split_once("-->") else {
            continue;
        };
        let from = from.trim();
        if from.is_empty() || from.contains(['[', '&']) {
            return Err(format!("mermaid line {}: cannot read '{line}'", number + 1));
        }
        for target in to.split('&') {
            let target = target.trim();
            if target.is_empty() || target.contains('[') {
                return Err(format!("mermaid line {}: cannot read '{line}'", number + 1));
            }
            edges.insert((from.to_string(), target.to_string()));
        }
    }
    Ok(edges)
}

/// Normal and build dependencies between the workspace's own crates.
fn cargo_edges() -> Edges {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let members: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut edges = Edges::new();
    for package in packages {
        for dep in package["dependencies"].as_array().unwrap() {
            let name = dep["name"].as_str().unwrap();
            if dep["kind"].as_str() == Some("dev") || !members.contains(name) {
                continue;
            }
            let from = package["name"].as_str().unwrap();
            edges.insert((short(from), short(name)));
        }
    }
    edges
}

fn listed(edges: &BTreeSet<&(String, String)>) -> String {
    edges
        .iter()
        .map(|(a, b)| format!("  {a} --> {b}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_architecture_diagram_is_the_crate_graph() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let markdown = std::fs::read_to_string(&doc).unwrap();
    let drawn = diagram_edges(&markdown, "## The crates").unwrap();
    let real = cargo_edges();
    assert!(real.contains(&("server".into(), "store".into())));
    let missing: BTreeSet<_> = real.difference(&drawn).collect();
    let extra: BTreeSet<_> = drawn.difference(&real).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's crate diagram differs from Cargo.toml:\n\
         dependencies not drawn:\n{}\narrows with no dependency:\n{}",
        listed(&missing),
        listed(&extra)
    );
}

#[test]
fn the_diagram_reader_reads_fanned_arrows_and_refuses_what_it_cannot_read() {
    let doc = "## The crates\n```mermaid\nflowchart TD\n  a[\"a<br/>x\"]\n  a --> b & c\n  c --> b\n```\n";
    let edges = diagram_edges(doc, "## The crates").unwrap();
    let expected: Edges = [("a", "b"), ("a", "c"), ("c", "b")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(edges, expected);
    let bad = "## The crates\n```mermaid\n  a[\"x\"] --> b\n```\n";
    assert!(diagram_edges(bad, "## The crates").is_err());
    assert!(diagram_edges("no heading", "## The crates").is_err());
}

/// Every package `package` links on this host (normal and build dependencies, transitively),
/// by name, read from `cargo metadata`'s resolved graph. The graph is filtered to the host's
/// platform: unfiltered, cargo wants every platform's packages (Windows-only ones included),
/// which a machine that only ever built for itself has not downloaded, and `--offline`
/// then fails.
fn linked_by(package: &str) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let version = Command::new(env!("CARGO"))
        .arg("-vV")
        .output()
        .expect("run cargo -vV");
    let version = String::from_utf8_lossy(&version.stdout);
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("no host triple in `cargo -vV`:\n{version}"));
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", host])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let name_of = |id: &str| -> String {
        metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["name"].as_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let nodes = metadata["resolve"]["nodes"].as_array().unwrap();
    let start = nodes
        .iter()
        .find(|n| name_of(n["id"].as_str().unwrap()) == package)
        .unwrap_or_else(|| panic!("{package} is not in the workspace's graph"));
    let mut seen = BTreeSet::new();
    let mut stack = vec![start];
    while let Some(node) = stack.pop() {
        for dep in node["deps"].as_array().unwrap() {
            let linked = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            let id = dep["pkg"].as_str().unwrap();
            if linked && seen.insert(name_of(id)) {
                stack.extend(nodes.iter().find(|n| n["id"] == id));
            }
        }
    }
    seen
}

/// The server hosts shadows (crate `adapt`) but writes no replay output: the CSV writer
/// and the simulator's charts and histograms stay out of its binary.
#[test]
fn the_server_links_none_of_the_simulators_output_writers() {
    let linked = linked_by("mantle-server");
    assert!(linked.contains("mantle-adapt"), "{linked:?}");
    for writer in ["csv", "plotters", "hdrhistogram", "mantle-sim"] {
        assert!(
            !linked.contains(writer),
            "mantle-server links {writer} (cargo tree -p mantle-server -i {writer})"
        );
    }
}
