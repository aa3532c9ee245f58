//! Reading a policy file with a byte cap: a path such as `/dev/zero` or a huge file must
//! end in a clear error naming it, not in reading until memory runs out.

use std::io::Read;
use std::path::Path;

use crate::limits::Limits;

/// The policy source in `path`: at most [`Limits::MAX_SOURCE_BYTES`] bytes of UTF-8. The
/// error is the reason alone; callers put the path before it (`{path}: cannot read policy:
/// {reason}`, as [`LoadError::Io`](crate::LoadError::Io) shows it).
pub fn read_policy_source(path: &Path) -> Result<String, String> {
    let cap = Limits::MAX_SOURCE_BYTES;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    // One byte past the cap tells a file of exactly the cap from a longer one.
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > cap {
        return Err(format!(
            "a policy source may be at most {cap} bytes; this file is longer"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// [`read_policy_source`] with the path in front of the error.
pub fn read_policy_file(path: &Path) -> Result<String, String> {
    read_policy_source(path).map_err(|e| format!("{}: cannot read policy: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_after_the_cap() {
        let msg = read_policy_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            msg,
            "/dev/zero: cannot read policy: a policy source may be at most 1048576 bytes; \
             this file is longer"
        );
        let missing = read_policy_file(Path::new("/nonexistent/p.lua")).unwrap_err();
        assert!(
            missing.starts_with("/nonexistent/p.lua: cannot read policy: "),
            "{missing}"
        );
    }
}
