//! `mantle serve FILE`: the example configuration file in docs/ starts a server with its
//! settings, flags on the command line override it, and a mistake in a file is one line
//! naming the file and the line.

mod common;

use common::{repo, Serve};
use std::process::Command;

fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    pair[1].clone()
}

#[test]
fn the_example_file_in_docs_starts_a_server_and_flags_override_it() {
    // The file says port 6380 and data-dir /var/lib/mantle: the command line's --port 0 and
    // --data-dir (added by `Serve`) win.
    let server = Serve::start(&["docs/mantle.conf", "--port", "0", "--eviction", "sieve"]);
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "max-keys"), "5000");
    assert_eq!(config_get(&mut con, "maxmemory"), "0");
    assert_ne!(config_get(&mut con, "port"), "6380");
    let stats: Vec<redis::Value> = redis::cmd("CACHE").arg("STATS").query(&mut con).unwrap();
    assert!(
        format!("{stats:?}").contains("sieve"),
        "the command line's --eviction must win: {stats:?}"
    );
    let info: String = redis::cmd("INFO").arg("warmup").query(&mut con).unwrap();
    assert!(info.contains("warmup_strategy:lastk"), "{info}");
    assert!(info.contains("warmup_k:1000"), "{info}");
}

#[test]
fn the_config_flag_works_and_a_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, "# ok so far\nmax-keys 100\nmax-keys many\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&path)
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!("mantle: {}:3: max-keys many: ", path.display());
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
