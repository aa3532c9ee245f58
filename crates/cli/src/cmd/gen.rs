//! `mantle gen`: synthetic workloads. `mantle gen parsplice` writes a ParSplice-like trace;
//! `mantle gen mixed` seed 004's small-files-plus-checkpoint block workload.

use std::path::PathBuf;

use anyhow::{Context, Result};
use trace::gen::mixed::{self, MixedParams};
use trace::gen::parsplice::{self, ParspliceParams};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub generator: Generator,
}

#[derive(clap::Subcommand)]
pub enum Generator {
    /// A ParSplice-like key-value trace (`timestamp_s,op,key` CSV; zstd when FILE ends in .zst).
    Parsplice(ParspliceArgs),
    /// Seed 004's mixed block workload: random small files and metadata concurrent with
    /// sequential checkpoint writes and reads (MSR Cambridge CSV; zstd when FILE ends in .zst).
    Mixed(MixedArgs),
}

#[derive(clap::Args)]
pub struct MixedArgs {
    /// Seed: the same seed and parameters give the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests (I/Os) to write.
    #[arg(long, default_value_t = MixedParams::default().requests)]
    pub requests: u64,
    /// Small files in the random stream.
    #[arg(long, default_value_t = MixedParams::default().files)]
    pub files: u64,
    /// Checkpoint file size (IOR wrote 20 GB).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub checkpoint: u64,
    /// Share of requests from the random small-file/metadata stream.
    #[arg(long, default_value_t = MixedParams::default().small_share)]
    pub small_share: f64,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    sim::parse_bytes(text)
}

#[derive(clap::Args)]
pub struct ParspliceArgs {
    /// Seed: the same seed and parameters give the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Length of the run in trace time: seconds (3600), or with a unit (90m, 4h).
    #[arg(long, default_value = "1h", value_parser = super::analyze::parse_seconds, value_name = "DURATION")]
    pub duration: f64,
    /// Worker tasks reading the cache (the calibration run had 28).
    #[arg(long, default_value_t = 28)]
    pub workers: u32,
    /// Growth rate relative to the calibration run (1.0); 0.1 is seed 000's slower Δ2.
    #[arg(long, default_value_t = 1.0)]
    pub growth_rate: f64,
    /// Temperature relative to the calibration run (1.0): higher means more state transitions.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Timestamp of the first second.
    #[arg(long, default_value_t = 0)]
    pub start_time: u64,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    match args.generator {
        Generator::Mixed(a) => {
            let params = MixedParams {
                seed: a.seed,
                requests: a.requests,
                files: a.files,
                checkpoint_bytes: a.checkpoint,
                small_share: a.small_share,
                ..MixedParams::default()
            };
            params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            let summary = mixed::write_file(&params, &a.output)
                .with_context(|| format!("writing {}", a.output.display()))?;
            println!(
                "wrote {} I/Os ({} reads, {} writes, {} checkpoint I/Os, {} bytes addressable) to {}",
                summary.requests,
                summary.reads,
                summary.writes,
                summary.checkpoint_ios,
                summary.address_bytes,
                a.output.display()
            );
            Ok(())
        }
        Generator::Parsplice(a) => {
            let params = ParspliceParams {
                seed: a.seed,
                duration_s: a.duration.round().max(1.0) as u64,
                workers: a.workers,
                growth_rate: a.growth_rate,
                temperature: a.temperature,
                start_time: a.start_time,
            };
            params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            let summary = parsplice::write_file(&params, &a.output)
                .with_context(|| "generating the ParSplice trace".to_string())?;
            println!(
                "wrote {} requests ({} gets, {} puts, {} keys, {} superbasins) to {}",
                summary.requests,
                summary.gets,
                summary.puts,
                summary.unique_keys,
                summary.fans,
                a.output.display()
            );
            Ok(())
        }
    }
}
