//! `mantle`: the command-line front end. Parses arguments and calls into the library crates;
//! no cache or policy logic lives here.

mod cmd;

/// mimalloc instead of glibc's malloc: glibc keeps a 32 MiB+ arena per thread that grows with
/// the server's many small key+value allocations and seldom shrinks, which put the server's
/// memory at 2.5x Redis's for the same data (bench/server_memory_vs_redis); mimalloc's pages
/// are smaller, shared out per size class and returned to the OS when freed. Built to
/// override `malloc` too, so that RocksDB's allocations (memtables, blocks read from its files)
/// come from the same pages instead of glibc's arenas, which kept ~35 MB freed by RocksDB
/// resident at 1M keys (bench/RESULTS.md, issue 30).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mantle",
    version,
    about = "Programmable cache management: replay, analyze, serve"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace through a cache and report hit ratio, footprint and back-end load.
    Replay(cmd::replay_args::Args),
    /// Replay one trace under several setups (no management, fixed sizes, policies) and compare.
    Compare(cmd::compare::Args),
    /// Analyze a trace: key-space activity, popularity, miss-ratio curve, access fans, regimes.
    Analyze(cmd::analyze::Args),
    /// Generate a synthetic workload trace.
    Gen(cmd::gen::Args),
    /// Run the cache server (Redis protocol) in front of RocksDB or an upstream tier.
    Serve(cmd::serve::Args),
    /// Check or unit-test a Lua policy.
    Policy(cmd::policy::Args),
    /// Show or change a cluster's slot map (status, rebalance, move).
    Cluster(cmd::cluster::Args),
}

fn main() {
    let args = match cmd::config_file::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("mantle: {err}");
            std::process::exit(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => usage_error(err),
    };
    if matches!(cli.command, Command::Serve(_)) {
        return_freed_memory_at_once();
        if purge_delay_ms() > 0 {
            purge_freed_memory_periodically();
        }
    } else {
        die_quietly_on_closed_stdout();
    }
    let result = match cli.command {
        Command::Replay(args) => cmd::replay::run(args),
        Command::Analyze(args) => cmd::analyze::run(args),
        Command::Compare(args) => cmd::compare::run(args),
        Command::Gen(args) => cmd::gen::run(args),
        Command::Policy(args) => cmd::policy::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Cluster(args) => cmd::cluster::run(args),
    };
    if let Err(err) = result {
        eprintln!("mantle: {err:#}");
        std::process::exit(1);
    }
}

extern "C" {
    /// mimalloc's collection of the calling thread's heap; it also purges, process-wide, the
    /// arena ranges freed more than mimalloc's `purge_delay` ago.
    fn mi_collect(force: bool);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (the `mimalloc` crate's constants
/// stop before it); a test checks it names the option whose default is 1,000 ms.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// The environment variable through which mimalloc reads the same option at start.
const PURGE_DELAY_VARIABLE: &str = "MIMALLOC_PURGE_DELAY";

/// Memory the allocator gets back goes back to the OS as it comes (purge delay 0) instead of a
/// second later. With the delay, a range freed and soon handed out again kept every page the
/// old owner had touched, whether or not the new one ever touches it: RocksDB's memtable
/// blocks and the cache's tables as they grow free large ranges that the next allocations
/// reuse only in part. Loading 100,000 keys of 64 B left ~5.5 MiB more resident with the
/// delay (bench/RESULTS.md, issue 30); what it costs is a page fault when a purged page is
/// used again (0.03 to 0.05 more per SET in bursts). `MIMALLOC_PURGE_DELAY` set in the
/// environment still wins, to compare the two.
fn return_freed_memory_at_once() {
    if std::env::var_os(PURGE_DELAY_VARIABLE).is_none() {
        // SAFETY: mi_option_set only stores a number in mimalloc's option table.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
    }
}

/// How long mimalloc waits before it purges a freed range, in milliseconds (0: at once).
fn purge_delay_ms() -> std::ffi::c_long {
    // SAFETY: mi_option_get only reads mimalloc's option table.
    unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }
}

/// How often the server hands memory freed in bulk back to the OS.
const PURGE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Gives the OS back what mimalloc holds freed when a purge delay was asked for in the
/// environment: the cache's tables as they grow (each growth frees the old copy), RocksDB's
/// flushed memtables. mimalloc purges such ranges `purge_delay` after the free, but only when
/// some thread next takes pages from its arenas or collects; a server that went quiet after a
/// load kept them resident (28 B per key after loading 1M keys, bench/RESULTS.md, issue 30).
/// A thread of its own collects once a second.
fn purge_freed_memory_periodically() {
    let spawned = std::thread::Builder::new()
        .name("mantle-purge".into())
        .spawn(|| loop {
            std::thread::sleep(PURGE_PERIOD);
            purge_freed_memory();
        });
    if let Err(err) = spawned {
        eprintln!("mantle: cannot start the thread that returns freed memory: {err}");
    }
}

fn purge_freed_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread.
    unsafe { mi_collect(false) }
}

/// `mantle replay ... | head` must end like any Unix filter when the reader goes away, not
/// panic in `println!`: the batch subcommands take the default SIGPIPE action back from the
/// Rust runtime (which ignores it). The server keeps ignoring it, since a client that hangs
/// up must cost one connection, not the process.
fn die_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: called once at start-up, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A bad flag or value ends like every other error: one line on stderr (what clap found,
/// its suggestion if it has one, and where to look), exit status 2. Help and version
/// requests print as clap renders them.
fn usage_error(err: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        err.exit();
    }
    let subcommand = std::env::args()
        .nth(1)
        .filter(|a| Cli::command().find_subcommand(a).is_some());
    eprintln!(
        "{}",
        one_line(&err.render().to_string(), subcommand.as_deref())
    );
    std::process::exit(2);
}

/// clap's multi-line rendering squeezed into one line: the `error:` paragraph (with the
/// arguments it lists), a `tip:` if there is one, and the help command for the subcommand.
fn one_line(rendered: &str, subcommand: Option<&str>) -> String {
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let message = message.join(" ");
    let mut out = format!(
        "mantle: {}",
        message.strip_prefix("error: ").unwrap_or(&message)
    );
    for tip in rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tip: "))
    {
        out.push_str(&format!("; {tip}"));
    }
    let help = match subcommand {
        Some(sub) => format!("mantle {sub} --help"),
        None => "mantle --help".to_string(),
    };
    out.push_str(&format!(" (see '{help}')"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident anonymous memory, in bytes.
    fn resident_anonymous() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("RssAnon:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kib << 10
    }

    /// The tests that read this process's resident memory, one at a time: another's block
    /// coming or going in between would move the figures.
    static RESIDENT_MEMORY_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_purge_delay_option_is_the_one_with_mimallocs_one_second_default() {
        if std::env::var_os(PURGE_DELAY_VARIABLE).is_some() {
            return; // the environment chose another value
        }
        let _alone = RESIDENT_MEMORY_TESTS.lock().unwrap();
        assert_eq!(purge_delay_ms(), 1000);
    }

    #[test]
    fn with_the_server_setting_freed_memory_goes_back_to_the_os_at_once() {
        let _alone = RESIDENT_MEMORY_TESTS.lock().unwrap();
        let default_delay = purge_delay_ms();
        return_freed_memory_at_once();
        let block = 64 << 20;
        let mut table = vec![0u8; block];
        table.iter_mut().step_by(4096).for_each(|byte| *byte = 1);
        let loaded = resident_anonymous();
        drop(table);
        // No collection and no wait: the free itself hands the range back.
        let after = resident_anonymous();
        // SAFETY: as in return_freed_memory_at_once.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, default_delay) }
        assert!(
            after + (block as u64) / 2 < loaded,
            "resident {loaded} bytes with the block, {after} right after freeing it"
        );
    }

    #[test]
    fn memory_freed_in_bulk_goes_back_to_the_os_once_the_purge_delay_is_over() {
        let _alone = RESIDENT_MEMORY_TESTS.lock().unwrap();
        let block = 256 << 20;
        let mut table = vec![0u8; block];
        table.iter_mut().step_by(4096).for_each(|byte| *byte = 1);
        let loaded = resident_anonymous();
        drop(table);
        std::thread::sleep(PURGE_PERIOD + std::time::Duration::from_millis(200));
        purge_freed_memory();
        let after = resident_anonymous();
        assert!(
            after + (block as u64) / 2 < loaded,
            "resident {loaded} bytes with the block, {after} after freeing and purging"
        );
    }

    #[test]
    fn c_and_cpp_allocations_are_mimallocs_too() {
        // RocksDB (a shared library) allocates through `malloc`: the program's own
        // definition, mimalloc's, must be the one the dynamic linker hands out.
        // SAFETY: dlsym and dladdr only read the loaded objects' symbol tables.
        let (found, object) = unsafe {
            let malloc = libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
            let mut info: libc::Dl_info = std::mem::zeroed();
            let found = libc::dladdr(malloc, &mut info) != 0 && !info.dli_fname.is_null();
            let object = found.then(|| std::ffi::CStr::from_ptr(info.dli_fname).to_owned());
            (found, object)
        };
        assert!(found, "malloc is in no loaded object");
        let object = std::fs::canonicalize(object.unwrap().to_str().unwrap()).unwrap();
        let program = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(object, program, "malloc comes from {}", object.display());
    }

    #[test]
    fn every_usage_error_renders_as_one_line() {
        for args in [
            &["mantle", "replay", "--bogus"][..],
            &["mantle", "replay", "--trace", "t", "--cache-size", "10x"],
            &[
                "mantle",
                "replay",
                "--trace",
                "t",
                "--server",
                "h:1",
                "--eviction",
                "lru",
            ],
            &[
                "mantle",
                "replay",
                "--trace",
                "t",
                "--cache-size",
                "1",
                "--param",
                "a=1",
            ],
            &["mantle", "replay", "--trace", "t", "--cahce-size", "1"],
            &["mantle", "compare", "--trace"],
            &["mantle", "frobnicate"],
        ] {
            let err = Cli::try_parse_from(args).err().expect("a usage error");
            let line = one_line(&err.render().to_string(), args.get(1).copied());
            assert!(!line.contains('\n'), "{line}");
            assert!(line.starts_with("mantle: "), "{line}");
            assert!(!line.contains("error:"), "{line}");
            assert!(line.ends_with("--help')"), "{line}");
            assert!(!line.contains(":  ") && !line.ends_with(": (see"), "{line}");
        }
    }
}
