//! The names of the trace formats, as users type them after `--format`.

use std::fmt;
use std::str::FromStr;

use crate::TraceError;

/// A trace format Mantle can read. [`Format::name`] is the `--format` spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// libCacheSim's headerless 24-byte records (time, id, size, next access).
    OracleGeneral,
    /// libCacheSim's `lcs` binary: an 8192-byte header, then versioned records.
    Lcs,
    /// Any CSV, described by a libCacheSim-style column spec.
    Csv,
    /// One key per line.
    Txt,
    /// VMware vscsi block trace (versions 1 and 2).
    Vscsi,
    /// MSR Cambridge block trace CSV.
    Msr,
    /// ARC paper `.lis` traces: `start count ignored request_number`.
    Arc,
    /// LIRS paper traces: one block number per line, `*` lines skipped.
    Lirs,
    /// ParSplice `semanticPerf` logs or the derived `timestamp_s,op,key` CSV.
    Parsplice,
    /// Twitter Twemcache CSV (`timestamp,key,key_size,value_size,client_id,op,ttl`).
    Twitter,
    /// Meta CacheLib kvcache or block_chunk (Tectonic) CSV with a header.
    Cachelib,
    /// Tencent Cloud Block Storage CSV (`Timestamp,Offset,Size,IOType,VolumeID`, sectors).
    TencentCbs,
    /// Tencent QQ photo-cache trace (space separated).
    TencentPhoto,
    /// SNIA SYSTOR'17 VDI block trace CSV.
    Systor,
    /// Raw array of 32-bit little-endian keys.
    Bin32Le,
    /// Raw array of 32-bit big-endian keys.
    Bin32Be,
    /// Raw array of 64-bit little-endian keys.
    Bin64Le,
    /// Raw array of 64-bit big-endian keys.
    Bin64Be,
}

impl Format {
    /// Every format, in the order the docs list them.
    pub const ALL: [Format; 18] = [
        Format::OracleGeneral,
        Format::Lcs,
        Format::Csv,
        Format::Txt,
        Format::Vscsi,
        Format::Msr,
        Format::Arc,
        Format::Lirs,
        Format::Parsplice,
        Format::Twitter,
        Format::Cachelib,
        Format::TencentCbs,
        Format::TencentPhoto,
        Format::Systor,
        Format::Bin32Le,
        Format::Bin32Be,
        Format::Bin64Le,
        Format::Bin64Be,
    ];

    /// The name `--format` accepts and error messages use.
    pub fn name(self) -> &'static str {
        match self {
            Format::OracleGeneral => "oracleGeneral",
            Format::Lcs => "lcs",
            Format::Csv => "csv",
            Format::Txt => "txt",
            Format::Vscsi => "vscsi",
            Format::Msr => "msr",
            Format::Arc => "arc",
            Format::Lirs => "lirs",
            Format::Parsplice => "parsplice",
            Format::Twitter => "twitter",
            Format::Cachelib => "cachelib",
            Format::TencentCbs => "tencent-cbs",
            Format::TencentPhoto => "tencent-photo",
            Format::Systor => "systor",
            Format::Bin32Le => "bin32le",
            Format::Bin32Be => "bin32be",
            Format::Bin64Le => "bin64le",
            Format::Bin64Be => "bin64be",
        }
    }

    /// Whether every request of this format is a block I/O (so `block_size`,
    /// `expand_blocks` and `rw_ops` of [`crate::ReadOptions`] apply).
    pub fn is_block(self) -> bool {
        matches!(
            self,
            Format::Vscsi | Format::Msr | Format::TencentCbs | Format::Systor
        )
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Case-insensitive; `_` and `-` are interchangeable (`oracle_general`, `tencent_cbs`).
impl FromStr for Format {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = normalise(s);
        Format::ALL
            .iter()
            .copied()
            .find(|f| normalise(f.name()) == wanted)
            .or(match wanted.as_str() {
                "oracle" | "oraclegeneralbin" => Some(Format::OracleGeneral),
                "plain" | "text" => Some(Format::Txt),
                "systor17" | "sniasystor" => Some(Format::Systor),
                "tencent" | "cbs" => Some(Format::TencentCbs),
                "kvcache" | "tectonic" => Some(Format::Cachelib),
                _ => None,
            })
            .ok_or_else(|| TraceError::UnknownFormat {
                name: s.to_string(),
            })
    }
}

fn normalise(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
            assert_eq!(f.to_string().to_uppercase().parse::<Format>().unwrap(), f);
        }
    }

    #[test]
    fn separators_and_case_are_forgiven() {
        assert_eq!(
            "oracle_general".parse::<Format>().unwrap(),
            Format::OracleGeneral
        );
        assert_eq!("Tencent_CBS".parse::<Format>().unwrap(), Format::TencentCbs);
        assert_eq!("BIN64BE".parse::<Format>().unwrap(), Format::Bin64Be);
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = "parquet".parse::<Format>().unwrap_err().to_string();
        assert!(err.contains("`parquet`"), "{err}");
        assert!(
            err.contains("oracleGeneral") && err.contains("tencent-cbs"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }
}
