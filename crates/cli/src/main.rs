//! `mantle`: the command-line front end. Parses arguments and calls into the library crates;
//! no cache or policy logic lives here.

mod cmd;

use clap::{Parser, Subcommand};

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
    Replay(cmd::replay::Args),
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
    let cli = Cli::parse();
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
