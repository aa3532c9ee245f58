//! No import loop between modules, at any depth, in any crate of the workspace: for every
//! module, the graph of its child modules (an edge when code anywhere under one child names
//! something under another, through `crate::`, `super::`, `self::` or a child's bare name,
//! outside comments and unit tests) has no cycle. So each layer can be read, tested and
//! changed without the ones above it (docs/architecture.md lists the server's layers); a
//! child using its parent (`super::X`) is not a loop, two siblings using each other is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, as its path from the crate root (`[]` is the root, `["live", "journal"]`).
type ModPath = Vec<String>;
/// For each parent module, the import edges between its children.
type Graphs = BTreeMap<ModPath, Graph>;
type Graph = BTreeMap<String, BTreeSet<String>>;

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Every path a line names that starts with `crate`, `super` or `self`, or with one of
/// `bare` (names that resolve relative to the current module), as segments; a group
/// `a::{b::c, d}` gives one path per item.
fn paths_in(line: &str, bare: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut at = 0;
    while at < line.len() {
        let starts_word = at == 0 || {
            let c = bytes[at - 1] as char;
            !(c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
        };
        let word = ident(&line[at..]);
        if !starts_word || word.is_empty() {
            at += line[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let rest = &line[at + word.len()..];
        let rooted = ["crate", "super", "self"].contains(&word.as_str()) || bare.contains(&word);
        if rooted && rest.starts_with("::") {
            let (paths, used) = segments(&line[at..]);
            out.extend(paths);
            at += used.max(word.len());
        } else {
            at += word.len();
        }
    }
    out
}

/// The path(s) at the start of `text` (`a::b::{c, d::e}`) and the bytes they span.
fn segments(text: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut at = 0;
    loop {
        let word = ident(&text[at..]);
        if word.is_empty() {
            break;
        }
        prefix.push(word.clone());
        at += word.len();
        if !text[at..].starts_with("::") {
            return (vec![prefix], at);
        }
        at += 2;
        if text[at..].starts_with('{') {
            let group = &text[at + 1..];
            let end = matching_brace(group);
            let mut out = Vec::new();
            for item in split_top(&group[..end]) {
                let (inner, _) = segments(item.trim());
                for tail in inner {
                    let mut path = prefix.clone();
                    path.extend(tail);
                    out.push(path);
                }
                if inner_is_empty(item) {
                    out.push(prefix.clone());
                }
            }
            return (out, at + 1 + end);
        }
    }
    (vec![prefix], at)
}

fn inner_is_empty(item: &str) -> bool {
    ident(item.trim()).is_empty()
}

fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

fn split_top(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
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

/// The module a source file is: `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`.
fn module_of(file: &Path, src: &Path) -> ModPath {
    let relative = file.strip_prefix(src).unwrap();
    let mut path: ModPath = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let last = path.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !["lib", "main", "mod"].contains(&stem) {
        path.push(stem.to_string());
    }
    path
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `pub use a as b;` in the crate root: `b` is `a`.
fn aliases(root: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in code_lines(root) {
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

/// The sibling graphs of one crate's modules (`src` is its source folder).
fn crate_graphs(src: &Path) -> Graphs {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // Binaries under src/bin are crates of their own.
    files.retain(|f| !f.strip_prefix(src).unwrap().starts_with("bin"));
    let modules: BTreeSet<ModPath> = files.iter().map(|f| module_of(f, src)).collect();
    let root = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|name| std::fs::read_to_string(src.join(name)).ok())
        .unwrap_or_default();
    let aliases = aliases(&root);
    let mut graphs = Graphs::new();
    for file in &files {
        let here = module_of(file, src);
        let children: BTreeSet<String> = modules
            .iter()
            .filter(|m| m.len() == here.len() + 1 && m.starts_with(&here))
            .map(|m| m.last().unwrap().clone())
            .collect();
        let text = std::fs::read_to_string(file).unwrap();
        for line in code_lines(&text) {
            for path in paths_in(line, &children) {
                let Some(target) = resolve(&path, &here, &aliases) else {
                    continue;
                };
                // The longest prefix that is a module of this crate.
                let Some(target) = (0..=target.len())
                    .rev()
                    .map(|n| target[..n].to_vec())
                    .find(|p| modules.contains(p))
                else {
                    continue;
                };
                add_edge(&mut graphs, &here, &target);
            }
        }
    }
    graphs
}

/// `path` as named in module `here`, from the crate root.
fn resolve(path: &[String], here: &ModPath, aliases: &BTreeMap<String, String>) -> Option<ModPath> {
    let mut out = here.clone();
    let mut rest = path;
    match path.first()?.as_str() {
        "crate" => {
            out.clear();
            rest = &path[1..];
            if let Some(first) = rest.first() {
                let real = aliases.get(first).cloned().unwrap_or(first.clone());
                out.push(real);
                rest = &rest[1..];
            }
        }
        "self" => rest = &path[1..],
        _ => {}
    }
    while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
        out.pop()?;
        rest = tail;
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// Records `from` using `to` in the graph of the modules' nearest common parent, between the
/// two children of it they lie under; nothing when one contains the other.
fn add_edge(graphs: &mut Graphs, from: &ModPath, to: &ModPath) {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return;
    }
    graphs
        .entry(from[..common].to_vec())
        .or_default()
        .entry(from[common].clone())
        .or_default()
        .insert(to[common].clone());
}

/// The modules caught in import loops, as groups that all reach one another (the strongly
/// connected components with more than one module), each sorted.
fn tangles(graph: &Graph) -> BTreeSet<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|node| (node, reach(node))).collect();
    let mut out = BTreeSet::new();
    for (node, from_node) in &reached {
        let group: Vec<String> = from_node
            .iter()
            .filter(|other| reached.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        if group.len() > 1 {
            out.insert(group);
        }
    }
    out
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn graphs_of(krate: &str) -> Graphs {
    crate_graphs(&crates_dir().join(krate).join("src"))
}

/// Every loop in the workspace, one line each: `crate: parent: a, b` (`a` and `b`, children
/// of `parent`, use each other).
fn loops() -> Vec<String> {
    let mut out = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    for krate in crates {
        let name = krate.file_name().unwrap().to_string_lossy().to_string();
        for (parent, graph) in crate_graphs(&krate.join("src")) {
            let parent = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            for group in tangles(&graph) {
                out.push(format!("{name}: {parent}: {}", group.join(", ")));
            }
        }
    }
    out
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let server = graphs_of("server");
    assert!(server[&vec![]].contains_key("db") && server[&vec![]].contains_key("cmd"));
    let loops = loops();
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn the_servers_request_path_does_not_reach_up() {
    let graphs = graphs_of("server");
    let graph = &graphs[&vec![]];
    let db = &graph["db"];
    for upper in ["http", "instance", "warmup", "live", "cmd", "server"] {
        assert!(!db.contains(upper), "db uses {upper}");
    }
    assert!(
        graph.get("metrics").is_none_or(BTreeSet::is_empty),
        "metrics depends on {:?}",
        graph["metrics"]
    );
    assert!(
        !graph["live"].contains("frame"),
        "the policy thread builds frames"
    );
}

#[test]
fn the_checker_reads_paths_and_finds_nested_loops() {
    let none = BTreeSet::new();
    assert_eq!(
        paths_in(
            "use crate::{db::Db, frame, store::{Store}}; x::crate::no",
            &none
        ),
        [
            vec!["crate", "db", "Db"],
            vec!["crate", "frame"],
            vec!["crate", "store", "Store"]
        ]
    );
    assert_eq!(
        paths_in("$crate::log::line", &none),
        Vec::<Vec<String>>::new()
    );
    let children: BTreeSet<String> = ["journal".to_string()].into();
    assert_eq!(
        paths_in("let e = journal::Event::new(super::x::Y);", &children),
        [vec!["journal", "Event", "new"], vec!["super", "x", "Y"]]
    );
    let here: ModPath = vec!["live".into(), "journal".into()];
    let up = resolve(
        &["super".into(), "registry".into()],
        &here,
        &BTreeMap::new(),
    );
    assert_eq!(up.unwrap(), ["live", "registry"]);

    // Two siblings two levels down that use each other are a loop of their parent's graph.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("live")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod live;\n").unwrap();
    std::fs::write(src.join("live/mod.rs"), "mod a;\nmod b;\nuse a::X;\n").unwrap();
    std::fs::write(src.join("live/a.rs"), "use super::b::Y;\n").unwrap();
    std::fs::write(src.join("live/b.rs"), "use crate::live::a::X;\n").unwrap();
    let graphs = crate_graphs(src);
    let live = &graphs[&vec!["live".to_string()]];
    assert_eq!(
        tangles(live),
        [vec!["a".to_string(), "b".to_string()]].into()
    );
    // A child using its parent is not a loop.
    std::fs::write(src.join("live/b.rs"), "use super::X;\n").unwrap();
    let graphs = crate_graphs(src);
    assert!(tangles(&graphs[&vec!["live".to_string()]]).is_empty());
}
