//! Hands back to the page cache the code and read-only data that only start-up touched.
//!
//! The kernel maps a program's file pages into a process in 64 KiB fault-around windows, so
//! start-up (argument parsing, opening RocksDB with its option tables, the dynamic linker's
//! symbol look-ups over librocksdb's 1.3 MB `.dynstr`, building the Lua states) leaves about
//! 20 MiB of file pages resident that serving never runs again: 8 of the program's 11.8 MiB
//! of code, 5 of librocksdb's 6.6 and 3 of its symbol tables, next to Redis's 10 MiB of file
//! pages in all (bench/RESULTS.md, issue 30). Once the server listens, `MADV_DONTNEED` on each
//! such mapping unmaps them. The pages stay in the page cache (clean, shared with every other
//! process mapping the same files); what serving runs is mapped again by its first use, a
//! minor fault (no disk read while the page cache holds the file) that maps 64 KiB at once.
//!
//! Only pages identical to the file's are dropped. `MADV_DONTNEED` on a private mapping also
//! discards the process's private copies of its pages, and a mapping that is read-only now may
//! hold some: the dynamic linker writes a library's relocated pointers (`.data.rel.ro`, the
//! GOT) and then makes them read-only, and dropping those would hand the library its unrelocated
//! file contents back. So a mapping is released only when it is file-backed, not writable,
//! and holds no anonymous (privately copied) page; a writable one is skipped since it could
//! gain such a page at any moment.

use std::ops::Range;

/// Address ranges that can be released: file-backed, not writable, no private copy of any
/// page. `smaps` is the text of `/proc/<pid>/smaps`.
pub fn releasable(smaps: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut candidate: Option<Range<usize>> = None;
    for line in smaps.lines() {
        if let Some(range) = mapping_header(line) {
            candidate = range;
        } else if let Some(kib) = line.strip_prefix("Anonymous:") {
            let private_pages = kib.trim().trim_end_matches("kB").trim() != "0";
            if let Some(range) = candidate.take().filter(|_| !private_pages) {
                out.push(range);
            }
        }
    }
    out
}

/// For a mapping's header line (`start-end perms offset dev inode path`): `Some(Some(range))`
/// when the mapping may be released if it has no private pages, `Some(None)` for any other
/// mapping, `None` for a field line.
fn mapping_header(line: &str) -> Option<Option<Range<usize>>> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let (_offset, _device, _inode) = (fields.next()?, fields.next()?, fields.next()?);
    // The path: absolute for a file; empty for anonymous memory; `[heap]`, `[stack]`,
    // `[vdso]` and the like for the kernel's own.
    let file_backed = fields.next().is_some_and(|path| path.starts_with('/'));
    let writable = perms.as_bytes().get(1) != Some(&b'-');
    Some((file_backed && !writable && start < end).then_some(start..end))
}

/// What one release did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub mappings: usize,
    /// Bytes of address space the released mappings span (resident or not).
    pub span_bytes: usize,
}

/// Releases this process's start-up file pages (see the module's comment). Other threads may
/// run meanwhile: what they execute is mapped again on their next instruction. Libraries are
/// never unloaded here, so a range read from `smaps` is still the same file mapping when it
/// is released.
#[cfg(target_os = "linux")]
pub fn release() -> std::io::Result<Released> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = Released::default();
    for range in releasable(&smaps) {
        // SAFETY: the range is a whole mapping of this process whose pages are all the
        // file's own (no private copy, not writable), so dropping them loses nothing: every
        // later access maps the same bytes again from the page cache.
        let status = unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.end - range.start,
                libc::MADV_DONTNEED,
            )
        };
        if status == 0 {
            released.mappings += 1;
            released.span_bytes += range.end - range.start;
        }
    }
    Ok(released)
}

/// Elsewhere the kernel's paging is left as it is.
#[cfg(not(target_os = "linux"))]
pub fn release() -> std::io::Result<Released> {
    Ok(Released::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5563c31a7000-5563c3541000 r--p 00000000 fd:00 123 /usr/bin/mantle
Size:               3688 kB
Rss:                 768 kB
Anonymous:             0 kB
5563c3541000-5563c411e000 r-xp 00399000 fd:00 123 /usr/bin/mantle
Size:              12148 kB
Rss:                5336 kB
Anonymous:             0 kB
5563c411e000-5563c4177000 r--p 00f75000 fd:00 123 /usr/bin/mantle
Size:                356 kB
Rss:                 356 kB
Anonymous:           340 kB
5563c4177000-5563c417e000 rw-p 00fcd000 fd:00 123 /usr/bin/mantle
Size:                 28 kB
Rss:                  28 kB
Anonymous:             0 kB
7f1be3e00000-7f1be3e99000 r--s 00000000 fd:00 77 /var/lib/some file with spaces
Size:                612 kB
Rss:                  12 kB
Anonymous:             0 kB
7f1be4400000-7f1be4654000 rw-p 00000000 00:00 0 
Size:               2384 kB
Rss:                2384 kB
Anonymous:          2384 kB
7f1be4654000-7f1be4ce9000 r-xp 00000000 00:00 0                          [vdso]
Size:                  8 kB
Rss:                   8 kB
Anonymous:             0 kB
7f1be4ce9000-7f1be4eb1000 ---p 00000000 00:00 0 
Size:               1824 kB
Rss:                   0 kB
Anonymous:             0 kB
";

    #[test]
    fn only_unwritten_read_only_file_mappings_are_releasable() {
        assert_eq!(
            releasable(SMAPS),
            vec![
                0x5563c31a7000..0x5563c3541000, // the program's headers and symbol tables
                0x5563c3541000..0x5563c411e000, // its code
                0x7f1be3e00000..0x7f1be3e99000, // a read-only shared file mapping
            ],
            "left alone: relocated read-only data (anonymous pages), writable data, \
             anonymous memory, the vDSO, guard pages"
        );
    }

    #[test]
    fn a_mapping_without_an_anonymous_line_is_not_released() {
        // Old kernels without the field: nothing proves the pages are the file's.
        let header_only = "5563c3541000-5563c411e000 r-xp 00399000 fd:00 123 /usr/bin/mantle\n\
                           Rss:                5336 kB\n";
        assert!(releasable(header_only).is_empty());
    }

    fn resident_file_kib() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut file_backed = false;
        let mut kib = 0;
        for line in smaps.lines() {
            if mapping_header(line).is_some() {
                file_backed = line
                    .split_ascii_whitespace()
                    .nth(5)
                    .is_some_and(|path| path.starts_with('/'));
            } else if let Some(rss) = line.strip_prefix("Rss:") {
                if file_backed {
                    kib += rss
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap();
                }
            }
        }
        kib
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn releasing_drops_resident_file_pages_and_the_process_runs_on() {
        // Every test thread of this binary keeps running through the release: if a relocated
        // page were dropped, the next call through it would crash the whole test process.
        let before = resident_file_kib();
        let released = release().unwrap();
        let after = resident_file_kib();
        assert!(released.mappings > 0, "{released:?}");
        assert!(
            after < before,
            "resident file pages {before} KiB before the release, {after} KiB after"
        );
        // Code, constants and relocated pointers all still work after the release.
        let text = format!("{:?}", std::collections::BTreeMap::from([(1, "one")]));
        assert_eq!(text, r#"{1: "one"}"#);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        assert!(!releasable(&smaps).is_empty());
    }
}
