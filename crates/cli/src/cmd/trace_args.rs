//! The flags that say which trace to read and how, shared by every subcommand that reads one.

use anyhow::{anyhow, bail, Result};
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct TraceArgs {
    /// Trace file (compressed .zst/.gz/.xz/.bz2/.tar.gz files are read transparently).
    #[arg(long, value_name = "PATH")]
    pub trace: PathBuf,
    /// Trace format; detected from the file name and contents when omitted.
    #[arg(long, value_name = "F")]
    pub format: Option<String>,
    /// Column spec for csv traces, libCacheSim style: time-col=1,obj-id-col=2,obj-size-col=3,has-header=true
    #[arg(long, value_name = "SPEC")]
    pub csv: Option<String>,
    /// Block size in bytes for block traces (used with --expand-blocks and by arc).
    #[arg(long, default_value_t = 512, value_name = "BYTES")]
    pub block_size: u32,
    /// Block traces: one request per block an I/O touches, instead of one per I/O.
    #[arg(long)]
    pub expand_blocks: bool,
    /// Traces that record reads and writes: replay them as get and put instead of access.
    #[arg(long)]
    pub rw_ops: bool,
    /// The most requests one trace record may stand for (an arc block range, a cachelib
    /// op_count, a block I/O with --expand-blocks); a record asking for more is an error.
    #[arg(long, default_value_t = trace::ReadOptions::DEFAULT_MAX_RECORD_REQUESTS, value_name = "N")]
    pub max_record_requests: u64,
}

impl TraceArgs {
    /// `--format`, parsed.
    pub fn format(&self) -> Result<Option<trace::Format>> {
        self.format
            .as_deref()
            .map(str::parse::<trace::Format>)
            .transpose()
            .map_err(|e| anyhow!("--format: {e}"))
    }

    /// The reader options the flags describe.
    pub fn options(&self) -> Result<trace::ReadOptions> {
        if self.block_size == 0 {
            bail!("--block-size must be > 0");
        }
        let mut options = trace::ReadOptions {
            block_size: self.block_size,
            expand_blocks: self.expand_blocks,
            rw_ops: self.rw_ops,
            max_record_requests: self.max_record_requests,
            ..trace::ReadOptions::default()
        };
        if let Some(spec) = &self.csv {
            options.csv = Some(spec.parse().map_err(|e| anyhow!("--csv: {e}"))?);
        }
        Ok(options)
    }

    /// The format name to report: the one given, else the detected one.
    pub fn format_name(&self) -> String {
        match self.format() {
            Ok(Some(f)) => f.to_string(),
            _ => trace::detect(&self.trace)
                .map(|f| f.to_string())
                .unwrap_or_else(|_| "unknown".to_string()),
        }
    }
}
