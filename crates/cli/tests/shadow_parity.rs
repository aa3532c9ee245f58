//! Shadows and switching, one engine on two hosts: a generated trace replayed by
//! `mantle replay --shadow ... --switch ...` and by `mantle replay --server --tick` against a
//! `mantle serve --tick manual` running the same candidates as `POLICY SHADOW`s and the same
//! switch policy (`POLICY SWITCH LOAD`) makes the same switches, to the same candidates, at the
//! same ticks, for the same logged reasons (docs/adaptive.md, "In the server").

mod common;

use common::{json_of, mantle, parity_trace, repo, Serve};

/// Objects the real cache holds (`--cache-size` in replay, `--max-keys` in serve).
const CACHE: &str = "150";

/// A policy that keeps the cache at `n` objects.
fn keep(n: u64) -> String {
    format!(
        "function when() return servers[whoami].cachesize > {n} end\n\
         function howmuch() return servers[whoami].cachesize - {n} end\n"
    )
}

/// Candidates in preference order: registry name and object count.
const CANDIDATES: [(&str, u64); 3] = [("small", 30), ("mid", 100), ("big", 145)];
const SWITCH_PARAMS: [&str; 2] = ["dwell=3", "warm=2"];

fn serve() -> Serve {
    Serve::start(&["--threads", "2", "--tick", "manual", "--max-keys", CACHE])
}

/// `(tick, candidate, reason)` of each switch.
type Switches = Vec<(u64, String, String)>;

#[test]
fn replay_and_serve_switch_to_the_same_candidates_at_the_same_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "shadow_parity.csv");
    let switch = repo().join("policies/switch.lua");
    let switch = switch.to_str().unwrap();

    // Replay: each candidate a file, labelled with the name the server knows it by.
    let mut args: Vec<String> = [
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        CACHE,
        "--backend",
        "none",
        "--tick",
        "1s",
        "--switch",
        switch,
        "--json",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for p in SWITCH_PARAMS {
        args.extend(["--switch-param".to_string(), p.to_string()]);
    }
    for (name, n) in CANDIDATES {
        let file = dir.path().join(format!("{name}.lua"));
        std::fs::write(&file, keep(n)).unwrap();
        args.extend([
            "--shadow".to_string(),
            format!("{}:label={name}@1", file.display()),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sim = json_of(&mantle(&args));
    let replayed: Switches = sim["adaptive"]["timeline"]
        .as_array()
        .expect("replay reports the adaptive timeline")
        .iter()
        .skip(1)
        .map(|s| {
            (
                s["from_tick"].as_u64().unwrap(),
                s["version"].as_str().unwrap().to_string(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        !replayed.is_empty(),
        "the trace must make the switch act: {}",
        sim["adaptive"]
    );

    // Serve: the same versions in the registry (the first one running), the same shadows in
    // the same order, the same switch policy; then the trace in lock step.
    let server = serve();
    let mut c = redis::Client::open(format!("redis://{}", server.addr))
        .unwrap()
        .get_connection()
        .unwrap();
    for (name, n) in CANDIDATES.iter().rev() {
        let _: i64 = redis::cmd("POLICY")
            .arg("LOAD")
            .arg(*name)
            .arg(keep(*n))
            .query(&mut c)
            .unwrap();
    }
    for (name, _) in CANDIDATES {
        let _: String = redis::cmd("POLICY")
            .arg("SHADOW")
            .arg("ADD")
            .arg(name)
            .query(&mut c)
            .unwrap();
    }
    let source = std::fs::read_to_string(switch).unwrap();
    let _: () = redis::cmd("POLICY")
        .arg("SWITCH")
        .arg("LOAD")
        .arg(&SWITCH_PARAMS[..])
        .arg(source)
        .query(&mut c)
        .unwrap();
    let live = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--server",
        &server.addr,
        "--tick",
        "1s",
        "--json",
        "--quiet",
    ]));
    let log: Vec<String> = redis::cmd("POLICY")
        .arg("LOG")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    drop(server);
    let served: Switches = log
        .iter()
        .filter(|l| l.contains("event=switched"))
        .map(|l| {
            // msg="at tick N, from A to B@1: reason"
            let msg = l.split("msg=\"").nth(1).unwrap().trim_end_matches('"');
            let rest = msg.strip_prefix("at tick ").unwrap();
            let (tick, rest) = rest.split_once(", from ").unwrap();
            let (_, rest) = rest.split_once(" to ").unwrap();
            let (to, reason) = rest.split_once(": ").unwrap();
            (tick.parse().unwrap(), to.to_string(), reason.to_string())
        })
        .collect();
    assert_eq!(replayed, served, "replay's switches, then serve's");
    for key in ["requests", "hits", "misses", "evictions"] {
        assert_eq!(sim[key], live[key], "{key} differs");
    }
}
