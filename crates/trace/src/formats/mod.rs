//! One reader per trace format, in the libCacheSim style: each file knows one layout and
//! turns it into [`Request`](crate::Request)s.

mod arc;
mod cachelib;
mod csv;
mod lcs;
mod lirs;
mod msr;
mod oracle_general;
mod parsplice;
mod raw_keys;
mod systor;
mod tencent_cbs;
mod tencent_photo;
mod twitter;
mod txt;
mod vscsi;

pub(crate) use csv::preset_for_header;
pub(crate) use lcs::LCS_MAGIC;
pub(crate) use vscsi::vscsi_version;

use crate::source::Source;
use crate::{Format, ReadOptions, TraceError, TraceReader};

/// Builds the reader for `format` over an opened source.
pub(crate) fn open_reader(
    format: Format,
    source: Source,
    opts: &ReadOptions,
) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(match format {
        Format::OracleGeneral => Box::new(oracle_general::OracleGeneralReader::new(source)),
        Format::Lcs => Box::new(lcs::LcsReader::new(source, opts)?),
        Format::Csv => Box::new(csv::CsvReader::new(source, opts)?),
        Format::Txt => Box::new(txt::TxtReader::new(source)),
        Format::Vscsi => Box::new(vscsi::VscsiReader::new(source, opts)?),
        Format::Msr => Box::new(msr::MsrReader::new(source, opts)),
        Format::Arc => Box::new(arc::ArcReader::new(source, opts)),
        Format::Lirs => Box::new(lirs::LirsReader::new(source)),
        Format::Parsplice => Box::new(parsplice::ParspliceReader::new(source)),
        Format::Twitter => Box::new(twitter::TwitterReader::new(source)),
        Format::Cachelib => Box::new(cachelib::CachelibReader::new(source, opts)?),
        Format::TencentCbs => Box::new(tencent_cbs::TencentCbsReader::new(source, opts)),
        Format::TencentPhoto => Box::new(tencent_photo::TencentPhotoReader::new(source)),
        Format::Systor => Box::new(systor::SystorReader::new(source, opts)),
        Format::Bin32Le => Box::new(raw_keys::RawKeysReader::new(source, 4, false)),
        Format::Bin32Be => Box::new(raw_keys::RawKeysReader::new(source, 4, true)),
        Format::Bin64Le => Box::new(raw_keys::RawKeysReader::new(source, 8, false)),
        Format::Bin64Be => Box::new(raw_keys::RawKeysReader::new(source, 8, true)),
    })
}

/// Little-endian integers at fixed offsets of a record whose length the caller checked.
pub(crate) mod le {
    #[inline]
    pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
        let mut a = [0u8; 2];
        a.copy_from_slice(&b[at..at + 2]);
        u16::from_le_bytes(a)
    }

    #[inline]
    pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[at..at + 4]);
        u32::from_le_bytes(a)
    }

    #[inline]
    pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    }
}
