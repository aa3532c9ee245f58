//! Guessing a trace's format from its name and first bytes, for when `--format` is not given.
//!
//! Strong signals first: the lcs magic, names libCacheSim gives its files
//! (`*.oracleGeneral*`, `*.lcs`, `*.vscsi`), ParSplice's `semanticPerf` logs, ARC's `.lis`,
//! a format name as extension (`x.bin64be`). Then the shape of the first lines of text
//! files (known headers, field counts, op names). Raw binary key arrays carry no signal at
//! all and always need `--format`.

use crate::formats::{preset_for_header, vscsi_version, LCS_MAGIC};
use crate::parse::{parse_f64, parse_u64, trim, words, Fields};
use crate::Format;

/// The format `name` and `head` (the first bytes of the decompressed content) point to.
pub(crate) fn detect_format(name: &str, head: &[u8]) -> Option<Format> {
    if head.len() >= 8 && head[..8] == LCS_MAGIC.to_le_bytes() {
        return Some(Format::Lcs);
    }
    let lower = name.to_ascii_lowercase();
    if lower.contains("oraclegeneral") {
        return Some(Format::OracleGeneral);
    }
    if lower.contains("semanticperf") {
        return Some(Format::Parsplice);
    }
    let ext = lower.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "lcs" => return Some(Format::Lcs),
        "vscsi" => return Some(Format::Vscsi),
        "lis" => return Some(Format::Arc),
        _ => {}
    }
    // `x.bin64be` names its format; `.csv` and `.txt` say too little and are sniffed below.
    if let Some(f) = Format::ALL
        .iter()
        .find(|f| !matches!(f, Format::Csv | Format::Txt) && f.name().eq_ignore_ascii_case(ext))
    {
        return Some(*f);
    }
    if is_text(head) {
        sniff_text(head, ext)
    } else if vscsi_version(head).is_some() {
        Some(Format::Vscsi)
    } else {
        None
    }
}

/// Text if the head has no NUL byte and at most 1% other control characters.
fn is_text(head: &[u8]) -> bool {
    if head.is_empty() || head.contains(&0) {
        return false;
    }
    let odd = head
        .iter()
        .filter(|c| c.is_ascii_control() && !c.is_ascii_whitespace())
        .count();
    odd * 100 <= head.len()
}

const TWITTER_OPS: [&[u8]; 11] = [
    b"get", b"gets", b"set", b"add", b"cas", b"replace", b"append", b"prepend", b"delete", b"incr",
    b"decr",
];

fn sniff_text(head: &[u8], ext: &str) -> Option<Format> {
    // Lines that were cut by the end of the head are not judged.
    let complete = match head.iter().rposition(|c| *c == b'\n') {
        Some(i) => &head[..i],
        None => head,
    };
    let mut lines = complete
        .split(|c| *c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !trim(l).is_empty());
    let first = lines.next()?;
    let header: Vec<u8> = trim(first)
        .iter()
        .filter(|c| !c.is_ascii_whitespace())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if header.starts_with(b"timestamp_s,op,key") {
        return Some(Format::Parsplice);
    }
    let names: Vec<&[u8]> = header.split(|c| *c == b',').collect();
    if names.contains(&&b"op_count"[..])
        && (names.contains(&&b"key"[..]) || names.contains(&&b"block_id"[..]))
    {
        return Some(Format::Cachelib);
    }
    if header.starts_with(b"timestamp,response,iotype,lun,offset,size") {
        return Some(Format::Systor);
    }
    if preset_for_header(first).is_some() {
        return Some(Format::Csv);
    }
    if let Some(f) = sniff_record(first) {
        if f == Format::Lirs || f == Format::Txt {
            // A column of numbers: LIRS if it has `*` markers or the LIRS `.trace` name.
            let star = complete.split(|c| *c == b'\n').any(|l| trim(l) == b"*");
            return Some(if star || ext == "trace" {
                Format::Lirs
            } else {
                Format::Txt
            });
        }
        return Some(f);
    }
    match ext {
        "txt" => Some(Format::Txt),
        "csv" => Some(Format::Csv),
        _ => None,
    }
}

/// The format whose record shape `line` has.
fn sniff_record(line: &[u8]) -> Option<Format> {
    let fields: Vec<&[u8]> = Fields::new(line, b',').map(trim).collect();
    let numeric = |f: &[u8]| parse_f64(f).is_some();
    if fields.len() > 1 {
        match fields.len() {
            3 | 4 if fields[1].starts_with(b"DBMemory") || fields[1].starts_with(b"LDB") => {
                return Some(Format::Parsplice)
            }
            7 if fields[3].eq_ignore_ascii_case(b"read")
                || fields[3].eq_ignore_ascii_case(b"write") =>
            {
                return Some(Format::Msr)
            }
            7 if TWITTER_OPS.contains(&fields[5]) => return Some(Format::Twitter),
            5 if fields.iter().all(|f| parse_u64(f).is_some()) => return Some(Format::TencentCbs),
            6 if numeric(fields[0])
                && (fields[2].eq_ignore_ascii_case(b"r")
                    || fields[2].eq_ignore_ascii_case(b"w")) =>
            {
                return Some(Format::Systor)
            }
            _ => return None,
        }
    }
    let w: Vec<&[u8]> = words(line).collect();
    match w.len() {
        1 if parse_u64(w[0]).is_some() || w[0] == b"*" => Some(Format::Txt),
        4 if w.iter().all(|f| parse_u64(f).is_some()) => Some(Format::Arc),
        n if n >= 5
            && w[0].len() == 14
            && parse_u64(w[0]).is_some()
            && w[1].len() == 40
            && w[1].iter().all(u8::is_ascii_hexdigit) =>
        {
            Some(Format::TencentPhoto)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(name: &str, head: &[u8]) -> Option<Format> {
        detect_format(name, head)
    }

    #[test]
    fn by_name() {
        assert_eq!(
            d("x.oracleGeneral.bin", &[1, 0, 0]),
            Some(Format::OracleGeneral)
        );
        assert_eq!(d("cloudPhysicsIO.vscsi", &[0; 16]), Some(Format::Vscsi));
        assert_eq!(d("OLTP.lis", b"1 1 0 0\n"), Some(Format::Arc));
        assert_eq!(d("semanticPerf.4", b""), Some(Format::Parsplice));
        assert_eq!(d("keys.bin64be", &[7; 16]), Some(Format::Bin64Be));
    }

    #[test]
    fn lcs_magic_wins_over_name() {
        let mut head = LCS_MAGIC.to_le_bytes().to_vec();
        head.extend_from_slice(&[1, 0, 0, 0]);
        assert_eq!(d("cloudPhysicsIO.vscsi.lcs", &head), Some(Format::Lcs));
        assert_eq!(d("mystery", &head), Some(Format::Lcs));
    }

    #[test]
    fn by_content() {
        assert_eq!(
            d("a", b"timestamp_s,op,key\n1,GET,2\n"),
            Some(Format::Parsplice)
        );
        assert_eq!(d("a", b"1504318808,LDBCreate,0\n"), Some(Format::Parsplice));
        assert_eq!(
            d(
                "a",
                b"op_time,key,key_size,op,op_count,size\n1,k,2,GET,1,3\n"
            ),
            Some(Format::Cachelib)
        );
        assert_eq!(
            d("a", b"128166385295514663,hm,0,Write,9056014336,2048,2833\n"),
            Some(Format::Msr)
        );
        assert_eq!(
            d("a", b"0,q:q:1:8WTwl7huJeQ,17,249,1,get,0\n"),
            Some(Format::Twitter)
        );
        assert_eq!(
            d("a", b"1538323200,4247200,128,1,1058\n"),
            Some(Format::TencentCbs)
        );
        assert_eq!(
            d(
                "a",
                b"Timestamp,Response,IOType,LUN,Offset,Size\n1.5,0.1,R,0,512,4096\n"
            ),
            Some(Format::Systor)
        );
        assert_eq!(
            d(
                "a",
                b"20160201164604 085abb02a06850729bb01479466420d9e102d325 5 m 12903 1 PHONE 1\n"
            ),
            Some(Format::TencentPhoto)
        );
        assert_eq!(d("a", b"1842745 64 0 1\n"), Some(Format::Arc));
        assert_eq!(d("a", b"12\n*\n13\n"), Some(Format::Lirs));
        assert_eq!(d("cpp.trace", b"12\n13\n"), Some(Format::Lirs));
        assert_eq!(d("keys.txt", b"12\n13\n"), Some(Format::Txt));
        assert_eq!(d("keys.txt", b"alpha\nbeta\n"), Some(Format::Txt));
        assert_eq!(
            d("x.csv", b"version,time,op,size,lbn\n1,2,2a,512,4\n"),
            Some(Format::Csv)
        );
        assert_eq!(d("x.csv", b"a;b;c\n"), Some(Format::Csv));
    }

    #[test]
    fn raw_binary_is_not_guessed() {
        assert_eq!(
            d("web07.trace", &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]),
            None
        );
        assert_eq!(d("empty", b""), None);
    }
}
