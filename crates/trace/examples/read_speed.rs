//! Measures how fast a trace reads: `cargo run --release -p mantle-trace --example read_speed -- PATH [FORMAT] [REPEAT]`.
//! Prints requests, unique-free checksum and requests per second (best of REPEAT passes).

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: read_speed PATH [FORMAT] [REPEAT]");
        std::process::exit(2);
    };
    let format = args
        .next()
        .filter(|f| f != "auto")
        .map(|f| f.parse::<trace::Format>().unwrap_or_else(|e| fail(&e)));
    let repeat: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    let mut best = f64::INFINITY;
    let mut count = 0u64;
    let mut checksum = 0u64;
    for _ in 0..repeat {
        let start = Instant::now();
        let mut reader =
            trace::open(&path, format, &trace::ReadOptions::default()).unwrap_or_else(|e| fail(&e));
        count = 0;
        checksum = 0;
        while let Some(r) = reader.next_request().unwrap_or_else(|e| fail(&e)) {
            count += 1;
            checksum = checksum.wrapping_add(r.key ^ u64::from(r.size));
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{}: {count} requests (checksum {checksum:x}) in {best:.4} s = {:.1} M requests/s",
        path.display(),
        count as f64 / best / 1e6
    );
}

fn fail(e: &dyn std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1);
}
