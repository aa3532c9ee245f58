//! `mantle policy check`: compile a policy, list its callbacks, and point at sandbox
//! violations before the policy ever runs. The static scan is a small Lua tokenizer that finds
//! references to globals the sandbox does not provide; loading then catches everything else
//! (syntax errors, failing top-level code, missing callbacks).

use std::fmt;

use crate::engine::PolicyEngine;
use crate::error::PolicyId;
use crate::limits::Limits;

/// One finding, printed as `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: u32,
    pub message: String,
}

/// The result of checking one policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// File name as given.
    pub file: String,
    /// Callbacks found (`["chunk"]` for a Ceph-dialect balancer); empty when loading failed.
    pub callbacks: Vec<String>,
    pub ceph_dialect: bool,
    /// Errors; the policy is unusable when this is not empty.
    pub problems: Vec<Problem>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "{}:{}: {}", self.file, p.line, p.message)?;
        }
        if self.ok() {
            let style = if self.ceph_dialect {
                "Ceph balancer chunk (returns its targets)"
            } else {
                "callbacks"
            };
            writeln!(
                f,
                "{}: ok: {style}: {}",
                self.file,
                self.callbacks.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Globals whose use is certainly a sandbox violation, with what to do instead.
const STATIC_FORBIDDEN: &[(&str, &str)] = &[
    ("io", "policies cannot do I/O"),
    (
        "os",
        "policies cannot reach the operating system; use `now` for the time",
    ),
    ("package", "policies cannot load modules"),
    (
        "require",
        "policies cannot load modules; keep the policy in one file",
    ),
    ("debug", "the debug library is not available"),
    ("dofile", "policies cannot read files"),
    ("loadfile", "policies cannot read files"),
    (
        "coroutine",
        "coroutines are not available (they would escape the instruction budget)",
    ),
];

/// Checks policy `source` read from `file`.
pub fn check_source(file: &str, source: &str, limits: &Limits) -> CheckReport {
    let mut problems = scan_forbidden(source);
    let mut engine = PolicyEngine::new(*limits);
    let name = std::path::Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "policy".into());
    let (callbacks, ceph_dialect) =
        match engine.load_version(PolicyId::new(&name, 1), &format!("@{file}"), source) {
            Ok(_) => {
                let mut callbacks: Vec<String> =
                    engine.callbacks().iter().map(|s| s.to_string()).collect();
                if defines_lease(&name, file, source, limits) {
                    callbacks.push(crate::lease::LEASE_HOOK.to_string());
                }
                (callbacks, engine.is_ceph_dialect())
            }
            // A switch policy (docs/adaptive.md) defines `switch` instead of the callbacks.
            Err(crate::error::LoadError::NoCallbacks { .. })
                if crate::switch::SwitchPolicy::load(
                    &name,
                    &format!("@{file}"),
                    source,
                    &crate::value::Params::new(),
                    *limits,
                )
                .is_ok() =>
            {
                (vec!["switch".to_string()], false)
            }
            Err(e) => {
                let (line, message) = split_location(file, &e.to_string());
                // The static scan usually explains a failed top-level access already.
                if !problems.iter().any(|p| p.line == line) {
                    problems.push(Problem { line, message });
                }
                (Vec::new(), false)
            }
        };
    problems.sort_by_key(|p| p.line);
    CheckReport {
        file: file.to_string(),
        callbacks,
        ceph_dialect,
        problems,
    }
}

/// Whether the file defines a shared log's `lease` hook (which the server's sequencers run).
fn defines_lease(name: &str, file: &str, source: &str, limits: &Limits) -> bool {
    matches!(
        crate::lease::LeaseHook::compile(
            name,
            &format!("@{file}"),
            source,
            &crate::value::Params::new(),
            limits,
            crate::budget::Interrupt::default(),
        ),
        Ok(Some(_))
    )
}

/// Splits `file:line: message` (as Lua reports) into its line and message.
fn split_location(file: &str, text: &str) -> (u32, String) {
    let rest = text.strip_prefix(file).and_then(|r| r.strip_prefix(':'));
    if let Some(rest) = rest {
        if let Some((line, msg)) = rest.split_once(": ") {
            if let Ok(line) = line.parse() {
                return (line, msg.to_string());
            }
        }
        if let Some(msg) = rest.strip_prefix("1: ") {
            return (1, msg.to_string());
        }
    }
    (crate::error::line_of(text).unwrap_or(1), text.to_string())
}

/// Finds names of forbidden globals (and `string.dump`) outside strings and comments.
pub fn scan_forbidden(source: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut locals: Vec<String> = Vec::new();
    let mut prev = Token::Other;
    let mut prev_name = String::new();
    for (line, token) in Tokens::new(source) {
        if let Token::Name(name) = &token {
            let member = prev == Token::Dot;
            // `local name` shadows a global (only the first name of a list is tracked).
            if prev == Token::Name("local".into()) {
                locals.push(name.clone());
            } else if member && prev_name == "string" && name == "dump" {
                problems.push(Problem {
                    line,
                    message: "sandbox violation: string.dump is not available (binary chunks are not allowed)".into(),
                });
            } else if !member && !locals.contains(name) {
                if let Some((_, why)) = STATIC_FORBIDDEN.iter().find(|(n, _)| n == name) {
                    problems.push(Problem {
                        line,
                        message: format!(
                            "sandbox violation: global '{name}' is not available: {why}"
                        ),
                    });
                }
            }
            if prev != Token::Dot {
                prev_name = name.clone();
            }
        }
        prev = token;
    }
    problems
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Dot,
    Other,
}

/// A minimal Lua tokenizer: names, `.`/`:` (member access) and everything else, with line
/// numbers; strings and comments (including long brackets) are skipped.
struct Tokens<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
}

impl<'a> Tokens<'a> {
    fn new(src: &'a str) -> Tokens<'a> {
        Tokens {
            src: src.as_bytes(),
            pos: 0,
            line: 1,
        }
    }

    fn peek(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    /// `[[`, `[=[`, ... at the cursor: the level, else `None`.
    fn long_bracket_level(&self) -> Option<usize> {
        if self.peek(0) != b'[' {
            return None;
        }
        let mut level = 0;
        while self.peek(1 + level) == b'=' {
            level += 1;
        }
        (self.peek(1 + level) == b'[').then_some(level)
    }

    fn skip_long(&mut self, level: usize) {
        self.pos += level + 2;
        while self.pos < self.src.len() {
            if self.peek(0) == b'\n' {
                self.line += 1;
            }
            if self.peek(0) == b']'
                && (1..=level).all(|i| self.peek(i) == b'=')
                && self.peek(level + 1) == b']'
            {
                self.pos += level + 2;
                return;
            }
            self.pos += 1;
        }
    }

    fn skip_quoted(&mut self, quote: u8) {
        self.pos += 1;
        while self.pos < self.src.len() {
            match self.peek(0) {
                b'\\' => {
                    if self.peek(1) == b'\n' {
                        self.line += 1;
                    }
                    self.pos += 2;
                }
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                    return;
                }
                c if c == quote => {
                    self.pos += 1;
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = (u32, Token);

    fn next(&mut self) -> Option<(u32, Token)> {
        while self.pos < self.src.len() {
            let c = self.peek(0);
            match c {
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'-' if self.peek(1) == b'-' => {
                    self.pos += 2;
                    if let Some(level) = self.long_bracket_level() {
                        self.skip_long(level);
                    } else {
                        while self.pos < self.src.len() && self.peek(0) != b'\n' {
                            self.pos += 1;
                        }
                    }
                }
                b'"' | b'\'' => {
                    self.skip_quoted(c);
                    return Some((self.line, Token::Other));
                }
                b'[' if self.long_bracket_level().is_some() => {
                    let level = self.long_bracket_level().unwrap_or(0);
                    self.skip_long(level);
                    return Some((self.line, Token::Other));
                }
                c if c.is_ascii_alphabetic() || c == b'_' => {
                    let start = self.pos;
                    while self.peek(0).is_ascii_alphanumeric() || self.peek(0) == b'_' {
                        self.pos += 1;
                    }
                    let name = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
                    return Some((self.line, Token::Name(name)));
                }
                c if c.is_ascii_digit() => {
                    // Numbers, including `1.5`, `0x1p4`, `1e-3`: never member access.
                    while self.peek(0).is_ascii_alphanumeric()
                        || self.peek(0) == b'.'
                        || ((self.peek(0) == b'-' || self.peek(0) == b'+')
                            && matches!(self.src[self.pos - 1], b'e' | b'E' | b'p' | b'P'))
                    {
                        self.pos += 1;
                    }
                    return Some((self.line, Token::Other));
                }
                b'.' | b':' => {
                    let line = self.line;
                    let doubled = self.peek(1) == c;
                    self.pos += if doubled { 2 } else { 1 };
                    if doubled && c == b'.' && self.peek(0) == b'.' {
                        self.pos += 1;
                    }
                    // `..` (concat) and `::` (labels) are not member access.
                    return Some((line, if doubled { Token::Other } else { Token::Dot }));
                }
                _ => {
                    self.pos += 1;
                    return Some((self.line, Token::Other));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_forbidden_globals_outside_strings_and_comments() {
        let src = "-- os.execute in a comment\nlocal s = \"io.open\" .. os.date()\n--[[ require\n]] x = t.io\nlocal debug = 1\nprint(debug)\ny = string.dump(f)";
        let problems = scan_forbidden(src);
        let lines: Vec<(u32, &str)> = problems
            .iter()
            .map(|p| (p.line, p.message.as_str()))
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].0, 2);
        assert!(lines[0].1.contains("global 'os'"));
        assert_eq!(lines[1].0, 7);
        assert!(lines[1].1.contains("string.dump"));
    }

    #[test]
    fn reports_compile_errors_and_missing_callbacks_with_file_and_line() {
        let r = check_source(
            "p.lua",
            "function when()\n  return = 1\nend",
            &Limits::default(),
        );
        assert!(!r.ok());
        assert_eq!(r.problems[0].line, 2, "{r}");
        assert!(r.to_string().starts_with("p.lua:2: "), "{r}");
        let r = check_source("q.lua", "x = 1", &Limits::default());
        assert!(
            r.to_string()
                .contains("q.lua:1: policy defines none of the callbacks"),
            "{r}"
        );
    }

    #[test]
    fn lists_a_lease_hook_and_accepts_a_file_with_only_that() {
        let r = check_source(
            "l.lua",
            "function lease(log) return {mode = \"roundtrip\"} end",
            &Limits::default(),
        );
        assert!(r.ok(), "{r}");
        assert_eq!(r.callbacks, vec!["lease"]);
        assert_eq!(r.to_string(), "l.lua: ok: callbacks: lease\n");
    }

    #[test]
    fn lists_callbacks_of_a_good_policy() {
        let r = check_source(
            "f.lua",
            "function when() return true end\nfunction howmuch() return 1 end",
            &Limits::default(),
        );
        assert!(r.ok(), "{r}");
        assert_eq!(r.callbacks, vec!["when", "howmuch"]);
        assert_eq!(r.to_string(), "f.lua: ok: callbacks: when, howmuch\n");
    }

    #[test]
    fn a_violation_in_a_callback_is_found_before_it_runs() {
        let r = check_source(
            "v.lua",
            "function when()\n  os.execute('rm -rf /')\n  return true\nend",
            &Limits::default(),
        );
        assert!(!r.ok());
        assert_eq!(r.problems.len(), 1);
        assert_eq!(r.problems[0].line, 2);
        assert!(r.callbacks.contains(&"when".to_string()));
    }
}
