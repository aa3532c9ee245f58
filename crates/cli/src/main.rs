//! `mantle`: the command-line front end. Parses arguments and calls into the library crates;
//! no cache or policy logic lives here.

mod cmd;

/// mimalloc instead of glibc's malloc: glibc keeps a 32 MiB+ arena per thread that grows with
/// the server's many small key+value allocations and seldom shrinks, which put the server's
/// memory at 2.5x Redis's for the same data (bench/server_memory_vs_redis); mimalloc's pages
/// are smaller, shared out per size class and returned to the OS when freed.
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
    if !matches!(cli.command, Command::Serve(_)) {
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
