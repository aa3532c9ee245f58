//! `mantle serve` hands the file pages only start-up touched back to the page cache once it
//! listens (crates/server/src/start_up_pages.rs): its code is no longer mostly resident, and
//! everything it serves afterwards still works (dropping a page the dynamic linker had
//! relocated would crash it at the next call through that page).

#![cfg(target_os = "linux")]

mod common;

use common::Serve;

/// (resident, mapped) KiB of the server program's code (its executable file mapping).
fn program_code_kib(pid: u32) -> (u64, u64) {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut code, mut resident, mut mapped) = (false, 0, 0);
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            code = fields.get(1).is_some_and(|p| p.contains('x'))
                && fields
                    .get(5)
                    .is_some_and(|p| std::path::Path::new(p) == exe);
        } else if code {
            let kib = || fields[1].parse::<u64>().unwrap();
            match fields[0] {
                "Size:" => mapped += kib(),
                "Rss:" => resident += kib(),
                _ => {}
            }
        }
    }
    (resident, mapped)
}

#[test]
fn start_up_code_leaves_memory_and_the_server_serves_on() {
    let server = Serve::start(&["--threads", "1", "--maxmemory", "64MiB"]);
    // Read as soon as the server says it listens, before the tick and the first requests map
    // the code they run.
    let (resident, mapped) = program_code_kib(server.child.id());
    // Without the release, start-up alone leaves about two thirds of the code resident (7.8
    // to 8.3 of 11.9 MiB, bench/RESULTS.md); with it, 3.5 to 5 MiB.
    assert!(
        resident * 2 < mapped,
        "{resident} KiB of the program's {mapped} KiB of code resident after start-up"
    );
    let mut con = server.client();
    for i in 0..2_000 {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("value {i}"))
            .query(&mut con)
            .unwrap();
    }
    for i in (0..2_000).step_by(97) {
        let value: String = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(value, format!("value {i}"));
    }
    // Lua (a function library loaded and called), RocksDB's reads and the INFO report all
    // run code that start-up had run before the release.
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=sums\nredis.register_function('sum', function(keys, args) return args[1] + args[2] end)")
        .query(&mut con)
        .unwrap();
    let sum: i64 = redis::cmd("FCALL")
        .arg("sum")
        .arg(0)
        .arg(1)
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(sum, 3);
    let info: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    assert!(info.contains("used_memory_store"), "{info}");
}
