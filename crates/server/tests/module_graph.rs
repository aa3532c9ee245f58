//! The server's modules form no import loop: reading every `crate::module` path in
//! `src/` (outside comments and unit tests), the graph of top-level modules has no cycle, so
//! each layer can be read, tested and changed without the ones above it (see
//! docs/architecture.md for the layers).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `crate::a`, and each name of `crate::{a, b::c}`, in one line of code.
fn referenced(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let glued = rest[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':');
        rest = &rest[at + "crate::".len()..];
        if glued {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// The code of a file without its unit tests and comments.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end].lines().filter_map(|line| {
        let line = line.trim_start();
        if line.starts_with("//") {
            return None;
        }
        Some(line.split(" //").next().unwrap_or(line))
    })
}

fn collect(dir: &Path, root: &Path, aliases: &BTreeMap<String, String>, graph: &mut Graph) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, root, aliases, graph);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(root).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let edges = graph.entry(module.clone()).or_default();
        for line in code_lines(&text) {
            for name in referenced(line) {
                let target = aliases.get(&name).cloned().unwrap_or(name);
                if target != module {
                    edges.insert(target);
                }
            }
        }
    }
}

/// `pub use a as b;` in lib.rs: `b` is `a`.
fn aliases(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in code_lines(lib) {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        if let Some((from, to)) = rest.trim_end_matches(';').split_once(" as ") {
            let from = from.split("::").next().unwrap_or(from).trim();
            out.insert(to.trim().to_string(), from.to_string());
        }
    }
    out
}

/// A cycle, as the modules along it, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).unwrap();
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

fn server_graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let mut graph = Graph::new();
    collect(&root, &root, &aliases(&lib), &mut graph);
    graph
}

#[test]
fn server_modules_import_no_loop() {
    let graph = server_graph();
    assert!(graph.contains_key("db") && graph.contains_key("metrics"));
    if let Some(cycle) = find_cycle(&graph) {
        let edges: Vec<String> = graph
            .iter()
            .map(|(m, to)| {
                format!(
                    "{m} -> {}",
                    to.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        panic!(
            "import loop: {}\nthe graph:\n{}",
            cycle.join(" -> "),
            edges.join("\n")
        );
    }
}

#[test]
fn the_request_path_does_not_reach_up() {
    let graph = server_graph();
    let db = &graph["db"];
    for upper in ["http", "instance", "warmup", "live", "cmd", "server"] {
        assert!(!db.contains(upper), "db uses {upper}");
    }
    assert!(
        graph["metrics"].is_empty(),
        "metrics depends on {:?}",
        graph["metrics"]
    );
    assert!(
        !graph["live"].contains("frame"),
        "the policy thread builds frames"
    );
}

#[test]
fn the_checker_finds_a_loop_and_reads_groups() {
    assert_eq!(
        referenced("use crate::{db::Db, frame, store::{Store}}; x::crate::no"),
        ["db", "frame", "store"]
    );
    assert_eq!(referenced("let a = crate::log::line(1);"), ["log"]);
    assert_eq!(referenced("$crate::log::line"), Vec::<String>::new());
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    assert_eq!(find_cycle(&graph), None);
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
}
