//! What a library is before any Lua runs: its shebang line parsed as Redis 7 parses it, the
//! names it may use, and the record the registry keeps of it (every version, newest active).

use serde::{Deserialize, Serialize};

/// Largest library code accepted by `FUNCTION LOAD` (and a script by `EVAL`): the policy
/// source limit, so a library is never larger than what the sandbox's own `load` compiles.
pub const MAX_CODE_BYTES: usize = policy::Limits::MAX_SOURCE_BYTES;
/// Versions of one library kept for `FUNCTION ROLLBACK` (the newest is the active one).
pub const KEPT_VERSIONS: usize = 16;
/// Largest encoded record of one library's versions: older versions are dropped to stay under
/// it (etcd refuses values above 1.5 MiB by default).
pub const MAX_RECORD_BYTES: usize = 1 << 20;
/// Longest library or function name.
pub const MAX_NAME_LEN: usize = 64;

/// The metadata line `#!lua name=LIB` a library starts with, and where its code starts.
#[derive(Debug, PartialEq, Eq)]
pub struct Shebang {
    pub name: String,
}

/// Parses the first line of `code` as Redis does: `#!<engine> name=<lib> [key=value ...]`.
/// The errors are Redis's words.
pub fn parse_shebang(code: &str) -> Result<Shebang, String> {
    let first = code.lines().next().unwrap_or("");
    let Some(rest) = first.strip_prefix("#!") else {
        return Err("ERR Missing library metadata".into());
    };
    let mut parts = rest.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for part in parts {
        match part.split_once('=') {
            Some(("name", value)) if name.is_none() => name = Some(value.to_string()),
            _ => return Err(format!("ERR Invalid metadata value given: {part}")),
        }
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err(
            "ERR Library names can only contain letters, numbers, or underscores(_) and must \
             be at least one character long"
                .into(),
        );
    }
    Ok(Shebang { name })
}

/// The code Lua compiles: the shebang line blanked (Lua's loader would not skip it) so line
/// numbers in errors stay those of the text the user loaded.
pub fn body(code: &str) -> String {
    match code.find('\n') {
        Some(end) => format!("--{}", &code[end..]),
        None => String::new(),
    }
}

/// Redis's rule for library and function names, with a length bound (names become keys in
/// the registry and etcd).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// One stored version of a library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryVersion {
    pub version: u32,
    pub code: String,
    /// Milliseconds since the Unix epoch.
    pub loaded_at_ms: u64,
}

/// Everything the registry keeps of one library: its versions, the newest active. An empty
/// stack is a deleted library whose numbers are never given out again (so `LIB@N` always
/// names one code).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryHistory {
    pub name: String,
    /// The number the next version gets.
    pub next_version: u32,
    /// Oldest first; the last is active.
    pub stack: Vec<LibraryVersion>,
}

impl LibraryHistory {
    pub fn new(name: &str) -> LibraryHistory {
        LibraryHistory {
            name: name.to_string(),
            next_version: 1,
            stack: Vec::new(),
        }
    }

    pub fn active(&self) -> Option<&LibraryVersion> {
        self.stack.last()
    }

    /// Makes `code` the next version and the active one; the oldest versions beyond
    /// [`KEPT_VERSIONS`] or [`MAX_RECORD_BYTES`] are forgotten. Fails when even the new
    /// version alone is too large to store.
    pub fn push(&mut self, code: &str, now_ms: u64) -> Result<u32, String> {
        let version = self.next_version.max(1);
        self.next_version = version + 1;
        self.stack.push(LibraryVersion {
            version,
            code: code.to_string(),
            loaded_at_ms: now_ms,
        });
        let drop = self.stack.len().saturating_sub(KEPT_VERSIONS);
        self.stack.drain(..drop);
        while self.encode().len() > MAX_RECORD_BYTES {
            if self.stack.len() == 1 {
                return Err(format!(
                    "ERR library '{}' is too large to store (its record exceeds {} bytes)",
                    self.name, MAX_RECORD_BYTES
                ));
            }
            self.stack.remove(0);
        }
        Ok(version)
    }

    /// Goes back to the previous version; the error when there is none.
    pub fn rollback(&mut self) -> Result<u32, String> {
        if self.stack.len() < 2 {
            return Err(format!(
                "ERR library '{}' has no earlier version to roll back to",
                self.name
            ));
        }
        self.stack.pop();
        Ok(self.stack.last().map_or(0, |v| v.version))
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(raw: &[u8]) -> Result<LibraryHistory, String> {
        serde_json::from_slice(raw).map_err(|e| format!("unreadable library record: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_is_parsed_like_redis() {
        assert_eq!(
            parse_shebang("#!lua name=mylib\nreturn 1").unwrap().name,
            "mylib"
        );
        assert_eq!(
            parse_shebang("return 1").unwrap_err(),
            "ERR Missing library metadata"
        );
        assert_eq!(
            parse_shebang("#!js name=x\n").unwrap_err(),
            "ERR Engine 'js' not found"
        );
        assert_eq!(
            parse_shebang("#!lua\n").unwrap_err(),
            "ERR Library name was not given"
        );
        assert_eq!(
            parse_shebang("#!lua name=x foo=bar\n").unwrap_err(),
            "ERR Invalid metadata value given: foo=bar"
        );
        assert!(parse_shebang("#!lua name=a-b\n")
            .unwrap_err()
            .starts_with("ERR Library names can only contain"));
    }

    #[test]
    fn the_body_keeps_line_numbers() {
        let body = body("#!lua name=x\nlocal a = 1\nerror('x')");
        assert_eq!(body.lines().count(), 3);
        assert!(!body.starts_with("#!"));
    }

    #[test]
    fn history_keeps_a_bounded_stack_and_never_reuses_numbers() {
        let mut history = LibraryHistory::new("x");
        for i in 0..(KEPT_VERSIONS + 4) {
            history.push(&format!("code {i}"), 0).unwrap();
        }
        assert_eq!(history.stack.len(), KEPT_VERSIONS);
        assert_eq!(history.active().unwrap().version, KEPT_VERSIONS as u32 + 4);
        assert_eq!(history.rollback().unwrap(), KEPT_VERSIONS as u32 + 3);
        history.stack.clear();
        assert!(history.rollback().is_err());
        assert_eq!(history.push("again", 0).unwrap(), KEPT_VERSIONS as u32 + 5);
    }

    #[test]
    fn a_record_over_the_size_bound_drops_old_versions_or_is_refused() {
        let mut history = LibraryHistory::new("x");
        let big = "x".repeat(MAX_RECORD_BYTES / 3);
        for _ in 0..4 {
            history.push(&big, 0).unwrap();
        }
        assert!(history.stack.len() < 4);
        assert!(history.encode().len() <= MAX_RECORD_BYTES);
        let huge = "y".repeat(MAX_RECORD_BYTES + 1);
        assert!(history.push(&huge, 0).unwrap_err().contains("too large"));
    }
}
