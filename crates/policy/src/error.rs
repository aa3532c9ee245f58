//! Errors a policy can cause: rejected loads and failed ticks. Both name the policy version and,
//! when Lua knows it, the source line, so an operator can find the fault from one log line.

use std::fmt;

/// A policy version: `name@N`, N counting loads of that name from 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyId {
    pub name: String,
    pub version: u32,
}

impl PolicyId {
    pub fn new(name: &str, version: u32) -> PolicyId {
        PolicyId {
            name: name.to_string(),
            version,
        }
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// Why a tick failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A Lua runtime error (including sandbox violations such as calling `os.execute`).
    Runtime,
    /// The callback ran out of its instruction budget.
    InstructionBudget,
    /// The callback ran past its wall-clock time limit.
    TimeLimit,
    /// The host interrupted the callback (shutting down; not the policy's fault, never causes
    /// fallback).
    Interrupted,
    /// The policy exceeded its memory limit.
    Memory,
    /// A callback returned a value of the wrong type or shape.
    BadResult,
    /// The host passed an unusable tick input (not the policy's fault; never causes fallback).
    Input,
}

/// A failed tick: no action was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyError {
    pub policy: PolicyId,
    /// `load`, `when`, `howmuch`, `where` or `chunk` (Ceph dialect).
    pub callback: String,
    pub kind: ErrorKind,
    pub message: String,
    /// Source line of the fault, when known.
    pub line: Option<u32>,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {}: {}(): {}",
            self.policy, self.callback, self.message
        )
    }
}

impl std::error::Error for PolicyError {}

/// Why a policy was not loaded (the previously active one, if any, keeps running).
#[derive(Debug, Clone, PartialEq)]
pub enum LoadError {
    /// The file could not be read.
    Io { path: String, message: String },
    /// The source does not compile; `message` reads `chunk:line: reason`.
    Compile { message: String, line: Option<u32> },
    /// The chunk's top-level code failed when run once at load.
    Run { message: String, line: Option<u32> },
    /// Defines none of `load`, `when`, `howmuch`, `where` and returns no table.
    NoCallbacks { chunk: String },
    /// `replace` was called with no policy loaded.
    NothingToReplace,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, message } => write!(f, "{path}: cannot read policy: {message}"),
            LoadError::Compile { message, .. } => write!(f, "{message}"),
            LoadError::Run { message, .. } => write!(f, "{message}"),
            LoadError::NoCallbacks { chunk } => write!(
                f,
                "{chunk}:1: policy defines none of the callbacks load, when, howmuch, where nor a \
                 per-request hook (admit, on_hit, on_insert, on_evict, priority, evict) \
                 nor a lease hook \
                 (as globals) and does not return a table of targets (Ceph dialect)"
            ),
            LoadError::NothingToReplace => write!(f, "no policy is loaded, nothing to replace"),
        }
    }
}

impl std::error::Error for LoadError {}

/// The first `:<digits>:` in a Lua message: the line of `chunk:line: reason`, or the line a
/// budget error names as `(at line N)`.
pub(crate) fn line_of(message: &str) -> Option<u32> {
    if let Some(at) = message.find("(at line ") {
        let digits: String = message[at + 9..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return digits.parse().ok();
    }
    let bytes = message.as_bytes();
    let mut i = 0;
    while let Some(off) = message[i..].find(':') {
        let start = i + off + 1;
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        if end > start && bytes.get(end) == Some(&b':') {
            return message[start..end].parse().ok();
        }
        i = start;
    }
    None
}

/// `message` cut to [`crate::Limits::MAX_ERROR_BYTES`] (a policy can raise any string).
pub(crate) fn bounded(mut message: String) -> String {
    let max = crate::Limits::MAX_ERROR_BYTES;
    if message.len() > max {
        let mut cut = max;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

/// The innermost message of an mlua error (without Rust-side tracebacks).
pub(crate) fn root_message(err: &mlua::Error) -> String {
    match err {
        mlua::Error::CallbackError { cause, .. } => root_message(cause),
        mlua::Error::WithContext { cause, .. } => root_message(cause),
        // The traceback mlua appends is noise in a one-line log; the line is in the message.
        mlua::Error::RuntimeError(m) => m
            .split_once("\nstack traceback:")
            .map_or(m.as_str(), |(head, _)| head)
            .to_string(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(_) => "memory limit exceeded".to_string(),
        other => other.to_string(),
    }
}

/// Whether the error was (caused by) an allocation refused by the memory limit.
pub(crate) fn is_memory_error(err: &mlua::Error) -> bool {
    match err {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            is_memory_error(cause)
        }
        mlua::Error::RuntimeError(m) => m.contains("not enough memory"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lines_in_lua_messages() {
        assert_eq!(line_of("policies/fixed.lua:12: attempt to call"), Some(12));
        assert_eq!(line_of("budget exceeded (at line 7)"), Some(7));
        assert_eq!(line_of("no line here: at all"), None);
        assert_eq!(line_of("[string \"x\"]:3: oops"), Some(3));
    }
}
