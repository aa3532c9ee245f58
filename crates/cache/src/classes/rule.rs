//! Rule expressions of a class file (the "IO class name" column of Open CAS's layout) and
//! their evaluation against one request.
//!
//! An expression is an OR (`|`) of AND-groups (`&`) of conditions; `&` binds tighter, there
//! are no parentheses. `done` may be one term of a group: when that group matches,
//! classification stops at this class. Evaluation never allocates: the key is matched as the
//! bytes the caller passes.

use crate::glob::glob_match;
use std::fmt;

/// Operations a request can carry, as rule `op:NAME` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleOp {
    Get,
    Put,
    Delete,
    Access,
}

impl RuleOp {
    fn parse(text: &str) -> Option<RuleOp> {
        Some(match text.to_ascii_lowercase().as_str() {
            "get" | "read" => RuleOp::Get,
            "put" | "set" | "write" => RuleOp::Put,
            "delete" | "del" => RuleOp::Delete,
            "access" => RuleOp::Access,
            _ => return None,
        })
    }
}

/// What a rule looks at: one request (or one object being bulk-loaded).
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    /// The key as bytes. Replay renders 64-bit key ids in decimal (see `docs/cache-hints.md`).
    pub key: &'a [u8],
    pub size: u32,
    /// Byte offset for block traces, 0 otherwise.
    pub offset: u64,
    pub op: RuleOp,
    /// A client's explicit hint, if it sent one.
    pub hint: Option<&'a [u8]>,
}

/// Comparison operator of `size:OP:N` and `offset:OP:N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

impl Cmp {
    fn parse(text: &str) -> Option<Cmp> {
        Some(match text {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" => Cmp::Lt,
            "gt" => Cmp::Gt,
            "le" => Cmp::Le,
            "ge" => Cmp::Ge,
            _ => return None,
        })
    }

    #[inline]
    fn holds(self, value: u64, bound: u64) -> bool {
        match self {
            Cmp::Eq => value == bound,
            Cmp::Ne => value != bound,
            Cmp::Lt => value < bound,
            Cmp::Gt => value > bound,
            Cmp::Le => value <= bound,
            Cmp::Ge => value >= bound,
        }
    }
}

/// Longest hint name a `hint:` condition may name: what `SET ... HINT` accepts.
pub const MAX_HINT_NAME_BYTES: usize = 64;

/// One condition of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    KeyPrefix(Vec<u8>),
    /// `*` matches any run of bytes (also empty), `?` any one byte; everything else itself.
    KeyGlob(Vec<u8>),
    Size(Cmp, u64),
    Offset(Cmp, u64),
    Op(RuleOp),
    Hint(Vec<u8>),
}

impl Condition {
    #[inline]
    fn matches(&self, p: &Probe) -> bool {
        match self {
            Condition::KeyPrefix(prefix) => p.key.starts_with(prefix),
            Condition::KeyGlob(pattern) => glob_match(pattern, p.key),
            Condition::Size(cmp, n) => cmp.holds(u64::from(p.size), *n),
            Condition::Offset(cmp, n) => cmp.holds(p.offset, *n),
            Condition::Op(op) => p.op == *op,
            Condition::Hint(name) => p.hint == Some(name.as_slice()),
        }
    }

    fn parse(term: &str) -> Result<Condition, String> {
        let (name, arg) = term.split_once(':').ok_or_else(|| {
            format!("unknown condition `{term}` (expected key_prefix:, key_glob:, size:, offset:, op:, hint: or done)")
        })?;
        let number = |what: &str| -> Result<(Cmp, u64), String> {
            let (cmp, n) = arg.split_once(':').ok_or_else(|| {
                format!("`{term}`: expected {what}:OP:N with OP one of eq,ne,lt,gt,le,ge")
            })?;
            let cmp = Cmp::parse(cmp).ok_or_else(|| {
                format!("`{term}`: unknown comparison `{cmp}` (expected eq, ne, lt, gt, le or ge)")
            })?;
            let n = n
                .parse::<u64>()
                .map_err(|_| format!("`{term}`: `{n}` is not a non-negative integer"))?;
            Ok((cmp, n))
        };
        let text = |what: &str| -> Result<Vec<u8>, String> {
            if arg.is_empty() {
                Err(format!("`{term}`: {what} must not be empty"))
            } else {
                Ok(arg.as_bytes().to_vec())
            }
        };
        match name {
            "key_prefix" => Ok(Condition::KeyPrefix(text("the prefix")?)),
            "key_glob" => Ok(Condition::KeyGlob(text("the pattern")?)),
            "hint" => {
                let hint = text("the hint name")?;
                if hint.len() > MAX_HINT_NAME_BYTES {
                    return Err(format!(
                        "`hint:`: the hint name is {} bytes; at most {MAX_HINT_NAME_BYTES} (a \
                         longer hint is refused by `SET ... HINT`, so the rule could never match)",
                        hint.len()
                    ));
                }
                Ok(Condition::Hint(hint))
            }
            "size" => number("size").map(|(c, n)| Condition::Size(c, n)),
            "offset" => number("offset").map(|(c, n)| Condition::Offset(c, n)),
            "op" => RuleOp::parse(arg)
                .map(Condition::Op)
                .ok_or_else(|| format!("`{term}`: unknown op `{arg}` (expected get, put, delete or access)")),
            _ => Err(format!(
                "unknown condition `{name}` in `{term}` (expected key_prefix, key_glob, size, offset, op, hint or done)"
            )),
        }
    }
}

/// A parsed rule expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// OR of AND-groups; each group carries whether it said `done`.
    groups: Vec<(Vec<Condition>, bool)>,
    uses_key: bool,
}

/// The outcome of evaluating a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleMatch {
    No,
    Yes,
    /// Matched by a group that says `done`: stop classifying.
    Done,
}

impl Rule {
    /// Parses an expression such as `size:le:4096&op:get|key_prefix:meta/&done`.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty rule expression".to_string());
        }
        let mut groups = Vec::new();
        let mut uses_key = false;
        for group in text.split('|') {
            let mut conditions = Vec::new();
            let mut done = false;
            for term in group.split('&') {
                let term = term.trim();
                if term.is_empty() {
                    return Err(format!("empty term in `{text}` (a stray `&` or `|`?)"));
                }
                if term == "done" {
                    done = true;
                    continue;
                }
                let condition = Condition::parse(term)?;
                uses_key |= matches!(condition, Condition::KeyPrefix(_) | Condition::KeyGlob(_));
                conditions.push(condition);
            }
            if conditions.is_empty() {
                return Err(format!(
                    "`{group}` in `{text}` has no condition (`done` must be joined to one with &)"
                ));
            }
            groups.push((conditions, done));
        }
        Ok(Rule { groups, uses_key })
    }

    /// Whether any condition looks at the key (so callers know they must render it).
    pub fn uses_key(&self) -> bool {
        self.uses_key
    }

    /// The names `hint:NAME` conditions compare with (a server reserves these, so a client
    /// inventing names cannot crowd them out).
    pub fn hint_names(&self) -> impl Iterator<Item = &[u8]> {
        self.groups.iter().flat_map(|(conditions, _)| {
            conditions.iter().filter_map(|c| match c {
                Condition::Hint(name) => Some(name.as_slice()),
                _ => None,
            })
        })
    }

    #[inline]
    pub fn evaluate(&self, p: &Probe) -> RuleMatch {
        let mut matched = RuleMatch::No;
        for (conditions, done) in &self.groups {
            if conditions.iter().all(|c| c.matches(p)) {
                if *done {
                    return RuleMatch::Done;
                }
                matched = RuleMatch::Yes;
            }
        }
        matched
    }
}

impl fmt::Display for RuleOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleOp::Get => "get",
            RuleOp::Put => "put",
            RuleOp::Delete => "delete",
            RuleOp::Access => "access",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(key: &str, size: u32, offset: u64, op: RuleOp) -> Probe<'_> {
        Probe {
            key: key.as_bytes(),
            size,
            offset,
            op,
            hint: None,
        }
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let rule = Rule::parse("size:le:4096&op:get|key_prefix:meta").unwrap();
        assert_eq!(
            rule.evaluate(&probe("x", 100, 0, RuleOp::Get)),
            RuleMatch::Yes
        );
        assert_eq!(
            rule.evaluate(&probe("x", 100, 0, RuleOp::Put)),
            RuleMatch::No
        );
        assert_eq!(
            rule.evaluate(&probe("meta1", 1 << 20, 0, RuleOp::Put)),
            RuleMatch::Yes
        );
        assert!(rule.uses_key());
    }

    #[test]
    fn done_only_applies_to_its_group() {
        let rule = Rule::parse("offset:lt:1024&done|size:gt:10").unwrap();
        assert_eq!(
            rule.evaluate(&probe("", 1, 5, RuleOp::Access)),
            RuleMatch::Done
        );
        assert_eq!(
            rule.evaluate(&probe("", 11, 5000, RuleOp::Access)),
            RuleMatch::Yes
        );
        assert_eq!(
            rule.evaluate(&probe("", 1, 5000, RuleOp::Access)),
            RuleMatch::No
        );
        assert!(!rule.uses_key());
    }

    #[test]
    fn every_comparison_and_hint() {
        for (cmp, expect) in [
            ("eq", [false, true, false]),
            ("ne", [true, false, true]),
            ("lt", [true, false, false]),
            ("gt", [false, false, true]),
            ("le", [true, true, false]),
            ("ge", [false, true, true]),
        ] {
            let rule = Rule::parse(&format!("size:{cmp}:10")).unwrap();
            for (size, want) in [9, 10, 11].into_iter().zip(expect) {
                let got = rule.evaluate(&probe("", size, 0, RuleOp::Get)) == RuleMatch::Yes;
                assert_eq!(got, want, "size:{cmp}:10 on {size}");
            }
        }
        let longest = format!("hint:{}", "h".repeat(MAX_HINT_NAME_BYTES));
        assert!(Rule::parse(&longest).is_ok());
        let err = Rule::parse(&format!("{longest}h")).unwrap_err();
        assert!(
            err.contains("the hint name is 65 bytes; at most 64"),
            "{err}"
        );
        let rule = Rule::parse("hint:checkpoint").unwrap();
        let mut p = probe("k", 1, 0, RuleOp::Put);
        assert_eq!(rule.evaluate(&p), RuleMatch::No);
        p.hint = Some(b"checkpoint");
        assert_eq!(rule.evaluate(&p), RuleMatch::Yes);
    }

    #[test]
    fn malformed_expressions_say_why() {
        for (text, needle) in [
            ("", "empty"),
            ("size:le", "size:OP:N"),
            ("size:lte:4", "unknown comparison"),
            ("size:le:-4", "not a non-negative integer"),
            ("op:fetch", "unknown op"),
            ("colour:red", "unknown condition `colour`"),
            ("metadata", "unknown condition `metadata`"),
            ("size:le:4&", "empty term"),
            ("done", "no condition"),
            ("key_prefix:", "must not be empty"),
        ] {
            let err = Rule::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
