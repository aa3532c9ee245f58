//! Round-trip load on shared logs' sequencers, for bench/shared_log_balance: `CLIENTS`
//! threads per log, each taking one position at a time (`Log::next(1)`: a `ZLOG.NEXT` round
//! trip, as Malacology's balancer experiments force), for `SECONDS`; prints one CSV row a
//! second with the positions each log got in it. A sequencer that moves is followed as the
//! client library follows it (a `-MOVED` redirect, then `-NOSEQ` and recovery at a newer
//! epoch), so a balancer can move sequencers under the load.
//!
//! ```text
//! sequencer_load (cluster|proxy) URLS LOGS CLIENTS SECONDS
//! ```
//! `cluster`: a cluster-aware client on the nodes at `URLS` (comma-separated `redis://`),
//! following `-MOVED`; `proxy`: one connection per client to the first URL only, whose node
//! forwards what it does not own (`mantle serve --cluster-mode proxy`). `LOGS` is
//! comma-separated log names.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn usage() -> ! {
    eprintln!("usage: sequencer_load (cluster|proxy) URLS LOGS CLIENTS SECONDS");
    std::process::exit(2)
}

fn take<C: redis::ConnectionLike>(
    mut log: zlog::Log<C>,
    count: &AtomicU64,
    stop: &AtomicBool,
) -> zlog::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        log.next(1)?;
        count.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, urls, logs, clients, seconds] = &args[..] else {
        usage()
    };
    let proxy = match mode.as_str() {
        "cluster" => false,
        "proxy" => true,
        _ => usage(),
    };
    let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
    let logs: Vec<String> = logs.split(',').map(str::to_string).collect();
    let (Ok(clients), Ok(seconds)) = (clients.parse::<usize>(), seconds.parse::<u64>()) else {
        usage()
    };
    let counts: Arc<Vec<AtomicU64>> = Arc::new(logs.iter().map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..logs.len() * clients)
        .map(|t| {
            let (urls, name) = (urls.clone(), logs[t % logs.len()].clone());
            let (counts, stop) = (Arc::clone(&counts), Arc::clone(&stop));
            std::thread::spawn(move || {
                let count = &counts[t % counts.len()];
                let outcome = if proxy {
                    zlog::Log::open(&urls[0], &name).and_then(|log| take(log, count, &stop))
                } else {
                    zlog::Log::open_cluster(&urls, &name).and_then(|log| take(log, count, &stop))
                };
                if let Err(e) = outcome {
                    eprintln!("sequencer_load: client {t} of {name}: {e}");
                    std::process::exit(1);
                }
            })
        })
        .collect();
    println!("second,{},total", logs.join(","));
    let start = Instant::now();
    let mut before: Vec<u64> = vec![0; logs.len()];
    for second in 1..=seconds {
        let due = start + Duration::from_secs(second);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let got: Vec<u64> = now.iter().zip(&before).map(|(n, b)| n - b).collect();
        let row: Vec<String> = got.iter().map(u64::to_string).collect();
        println!("{second},{},{}", row.join(","), got.iter().sum::<u64>());
        before = now;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
}
