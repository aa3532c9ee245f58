//! Which trace to read and how: the Python form of the CLI's trace flags (`--format`,
//! `--csv`, `--block-size`, `--expand-blocks`, `--rw-ops`, `--max-record-requests`).

use crate::error;
use pyo3::prelude::*;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct TraceInput {
    pub path: PathBuf,
    pub format: Option<trace::Format>,
    pub options: trace::ReadOptions,
}

impl TraceInput {
    pub fn new(
        path: PathBuf,
        format: Option<&str>,
        csv: Option<&str>,
        block_size: u32,
        expand_blocks: bool,
        rw_ops: bool,
        max_record_requests: u64,
    ) -> PyResult<TraceInput> {
        let format = format
            .map(str::parse::<trace::Format>)
            .transpose()
            .map_err(|e| error(format!("format: {e}")))?;
        if block_size == 0 {
            return Err(error("block_size must be > 0"));
        }
        let mut options = trace::ReadOptions {
            block_size,
            expand_blocks,
            rw_ops,
            max_record_requests,
            ..trace::ReadOptions::default()
        };
        if let Some(spec) = csv {
            options.csv = Some(spec.parse().map_err(|e| error(format!("csv: {e}")))?);
        }
        Ok(TraceInput {
            path,
            format,
            options,
        })
    }

    pub fn open(&self) -> Result<Box<dyn trace::TraceReader>, trace::TraceError> {
        trace::open(&self.path, self.format, &self.options)
    }

    /// The format to report: the one given, else the detected one (as `replay --json` does).
    pub fn format_name(&self) -> String {
        match self.format {
            Some(f) => f.to_string(),
            None => trace::detect(&self.path)
                .map(|f| f.to_string())
                .unwrap_or_else(|_| "unknown".to_string()),
        }
    }
}
