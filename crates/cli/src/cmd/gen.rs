//! `mantle gen`: synthetic workloads. `mantle gen parsplice` writes a ParSplice-like trace;
//! `mantle gen mixed` seed 004's small-files-plus-checkpoint block workload; `mantle gen
//! hotspot` moving flash crowds for balancers; `mantle gen phases` working sets that change
//! (regime changes for adaptive setups).

use std::path::PathBuf;

use anyhow::{Context, Result};
use trace::gen::hotspot::{self, HotspotParams};
use trace::gen::mixed::{self, MixedParams};
use trace::gen::parsplice::{self, ParspliceParams};
use trace::gen::phases::{self, Phase, PhasesParams};

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
    /// Zipf keys with moving flash crowds, each on a narrow window of cluster slots: a
    /// workload for balancers (`timestamp_s,op,key` CSV; zstd when FILE ends in .zst).
    Hotspot(HotspotArgs),
    /// Working sets that change: phases played in order, repeated (`timestamp_s,op,key`
    /// CSV, reads only; zstd when FILE ends in .zst).
    Phases(PhasesArgs),
}

#[derive(clap::Args)]
pub struct PhasesArgs {
    /// Seed: the same seed and parameters give the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A phase, SECONDS,KEYS[,fresh][,scan|zipf=S]: KEYS keys read for SECONDS seconds,
    /// uniformly, as a cyclic scan or Zipf-popular; `fresh`: new keys each repetition.
    /// Repeatable: the phases play in order.
    #[arg(long = "phase", required = true, value_name = "PHASE")]
    pub phases: Vec<Phase>,
    /// Times the list of phases is played.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Requests per second.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

#[derive(clap::Args)]
pub struct HotspotArgs {
    /// Seed: the same seed and parameters give the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Length of the trace: seconds (600), or with a unit (10m, 1h).
    #[arg(long, default_value = "10m", value_parser = super::analyze::parse_seconds, value_name = "DURATION")]
    pub duration: f64,
    /// Requests per second.
    #[arg(long, default_value_t = HotspotParams::default().rate)]
    pub rate: f64,
    /// Distinct background keys.
    #[arg(long, default_value_t = HotspotParams::default().keys)]
    pub keys: u64,
    /// Zipf exponent of the background's popularity.
    #[arg(long, default_value_t = HotspotParams::default().skew)]
    pub skew: f64,
    /// Seconds each flash crowd lasts.
    #[arg(long, default_value_t = HotspotParams::default().crowd_seconds)]
    pub crowd_seconds: f64,
    /// Seconds between crowds.
    #[arg(long, default_value_t = HotspotParams::default().gap)]
    pub gap: f64,
    /// Share of all requests a crowd takes while it lasts.
    #[arg(long, default_value_t = HotspotParams::default().crowd_share)]
    pub crowd_share: f64,
    /// Keys a crowd reads.
    #[arg(long, default_value_t = HotspotParams::default().crowd_keys)]
    pub crowd_keys: u64,
    /// Width of the window of cluster slots a crowd's keys come from.
    #[arg(long, default_value_t = HotspotParams::default().crowd_slots)]
    pub crowd_slots: u16,
    /// Share of requests that are writes.
    #[arg(long, default_value_t = HotspotParams::default().write_share)]
    pub write_share: f64,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
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
    #[arg(long, default_value = "2GiB", value_parser = units::parse_bytes)]
    pub checkpoint: u64,
    /// Share of requests from the random small-file/metadata stream.
    #[arg(long, default_value_t = MixedParams::default().small_share)]
    pub small_share: f64,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
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
        Generator::Phases(a) => {
            let params = PhasesParams {
                seed: a.seed,
                phases: a.phases,
                repeat: a.repeat,
                rate: a.rate,
            };
            params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            let n = phases::write_file(&params, &a.output)?;
            println!("wrote {n} requests to {}", a.output.display());
            Ok(())
        }
        Generator::Hotspot(a) => {
            let params = HotspotParams {
                seed: a.seed,
                duration: a.duration,
                rate: a.rate,
                keys: a.keys,
                skew: a.skew,
                crowd_seconds: a.crowd_seconds,
                gap: a.gap,
                crowd_share: a.crowd_share,
                crowd_keys: a.crowd_keys,
                crowd_slots: a.crowd_slots,
                write_share: a.write_share,
            };
            params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            let n = hotspot::write_file(&params, &a.output)?;
            println!("wrote {n} requests to {}", a.output.display());
            Ok(())
        }
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
            let summary = mixed::write_file(&params, &a.output)?;
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
