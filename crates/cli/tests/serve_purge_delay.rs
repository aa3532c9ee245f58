//! `mantle serve` has mimalloc hand freed ranges back to the OS at once (crates/cli/src/main.rs,
//! `return_freed_memory_at_once`), so it needs no thread that purges them later; a purge delay
//! asked for in the environment wins, and then that thread runs.

#![cfg(target_os = "linux")]

mod common;

use common::Serve;

/// The names of the server's threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn the_server_purges_at_once_unless_the_environment_sets_a_delay() {
    let at_once = Serve::start(&["--threads", "1", "--maxmemory", "64MiB"]);
    let names = thread_names(at_once.child.id());
    assert!(names.iter().any(|n| n == "mantle-serve"), "{names:?}");
    assert!(!names.iter().any(|n| n == "mantle-purge"), "{names:?}");
    drop(at_once);

    let delayed = Serve::start_with_env(
        &["--threads", "1", "--maxmemory", "64MiB"],
        &[("MIMALLOC_PURGE_DELAY", "1000")],
    );
    let names = thread_names(delayed.child.id());
    assert!(names.iter().any(|n| n == "mantle-purge"), "{names:?}");
}
