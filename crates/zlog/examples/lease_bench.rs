//! The shared-log client under load, for `bench/shared_log`: N threads, each with its own
//! `Log`, for a fixed time; prints one CSV row `what,clients,per_s,p50_ms,p99_ms`.
//!
//! `reserve`: positions through the log's lease (`Log::reserve`: a round trip or a position
//! held locally, as the lease policy decides). `append`: whole appends of a 16-byte entry.
//!
//! On stderr: how many leased positions the clients gave up unused (handed back to the
//! sequencer, filled).
//!
//! Usage: lease_bench URL LOG reserve|append CLIENTS SECONDS LABEL

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        eprintln!("usage: lease_bench URL LOG reserve|append CLIENTS SECONDS LABEL");
        std::process::exit(2);
    }
    let (url, log, what, label) = (&args[1], &args[2], args[3].clone(), &args[6]);
    let clients: usize = args[4].parse().expect("CLIENTS: a number");
    let seconds: f64 = args[5].parse().expect("SECONDS: a number");
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (url, log, what) = (url.clone(), log.clone(), what.clone());
            std::thread::spawn(move || {
                let mut log = zlog::Log::open(&url, &log).expect("open the log");
                let mut latencies = Vec::with_capacity(1 << 20);
                let end = Instant::now() + Duration::from_secs_f64(seconds);
                let entry = [7u8; 16];
                while Instant::now() < end {
                    let start = Instant::now();
                    match what.as_str() {
                        "reserve" => {
                            log.reserve().expect("reserve");
                        }
                        "append" => {
                            log.append(&entry).expect("append");
                        }
                        other => panic!("unknown operation {other}"),
                    }
                    latencies.push(start.elapsed());
                }
                log.release().expect("release");
                (latencies, log.given_up())
            })
        })
        .collect();
    let began = Instant::now();
    let mut all: Vec<Duration> = Vec::new();
    let (mut given_back, mut filled) = (0, 0);
    for t in threads {
        let (latencies, (back, fills)) = t.join().expect("a client thread failed");
        all.extend(latencies);
        given_back += back;
        filled += fills;
    }
    let elapsed = began.elapsed().as_secs_f64().max(seconds);
    all.sort_unstable();
    let pick = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{label},{clients},{:.0},{:.4},{:.4}",
        all.len() as f64 / elapsed,
        pick(0.5),
        pick(0.99)
    );
    eprintln!("{label}, {clients} clients: unused leased positions: {given_back} handed back, {filled} filled");
}
