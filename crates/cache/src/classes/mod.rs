//! Cache hints by class (seed 004, as productised by Open CAS's I/O classes): a class file
//! maps each request to a class by rules, and each class has an eviction priority, an
//! allocation cap and a pinning mode. This module parses the file and classifies requests;
//! [`crate::ClassedCache`] enforces the classes. Both replay and the server use it, so a
//! key is always matched as bytes.
//!
//! File layout (CSV, Open CAS's header):
//!
//! ```text
//! IO class id,IO class name,Eviction priority,Allocation
//! 0,unclassified,255,1
//! 1,key_prefix:meta/&done,,0.2          <- empty priority: hard-pinned
//! 2,size:le:4096,soft:1,0.5             <- soft-pinned
//! 3,offset:ge:1073741824,200,0.1
//! ```
//!
//! Classification walks the classes in ascending id; the last class whose rule matches wins,
//! except that a match by a group containing `done` stops the walk. Class 0 is
//! `unclassified`, the fallback, and its rule column must say so.

mod rule;

pub use rule::{Cmp, Condition, Probe, Rule, RuleMatch, RuleOp, MAX_HINT_NAME_BYTES};

use std::fmt;
use std::path::Path;

/// Index of a class in a [`ClassSet`] (not its id in the file).
pub type ClassIndex = u8;

/// Most classes a file may define (ids 0..=255).
pub const MAX_CLASSES: usize = 256;

/// How a class is protected from eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// Evicted by priority: the highest priority number goes first.
    None,
    /// Evicted only when no unpinned object is left (and only for other pinned objects or
    /// explicit evictions/capacity cuts); the number orders soft-pinned classes.
    Soft,
    /// Never evicted. At its allocation cap the class admits nothing more.
    Hard,
}

/// One class of a class file.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassSpec {
    /// Id as written in the file.
    pub id: u8,
    /// The rule column as written (`unclassified` for class 0).
    pub name: String,
    /// `None` for class 0, which matches what nothing else claims.
    pub rule: Option<Rule>,
    /// 0..=255, lower is kept longer. For soft-pinned classes, the number after `soft:`;
    /// for hard-pinned classes 0.
    pub priority: u8,
    pub pinning: Pinning,
    /// Largest fraction of the capacity the class may hold; 0 = never cached.
    pub allocation: f64,
}

impl ClassSpec {
    /// Eviction rank: classes with a larger rank are evicted first; `None` for hard-pinned
    /// classes, which are never evicted. Unpinned classes rank 256..=511 by priority number,
    /// soft-pinned 0..=255, so every unpinned class goes before any soft-pinned one.
    pub fn eviction_rank(&self) -> Option<u16> {
        match self.pinning {
            Pinning::None => Some(256 + u16::from(self.priority)),
            Pinning::Soft => Some(u16::from(self.priority)),
            Pinning::Hard => None,
        }
    }

    /// Label for reports: `1:size:le:4096`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.id, self.name)
    }
}

/// A malformed class file: which file, which line, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassFileError {
    pub source: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ClassFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: line {}: {}", self.source, self.line, self.message)
    }
}

impl std::error::Error for ClassFileError {}

/// Every class of a file, in ascending id (the order classification walks them).
#[derive(Clone, Debug, PartialEq)]
pub struct ClassSet {
    classes: Vec<ClassSpec>,
    uses_key: bool,
}

/// The header Open CAS writes and reads.
const HEADER: [&str; 4] = [
    "IO class id",
    "IO class name",
    "Eviction priority",
    "Allocation",
];

impl ClassSet {
    /// Reads and parses a class file.
    pub fn from_file(path: &Path) -> Result<ClassSet, ClassFileError> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ClassFileError {
            source: source.clone(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        ClassSet::parse(&text, &source)
    }

    /// Parses class-file text; `source` names it in errors. Blank lines and lines starting
    /// with `#` are skipped; the first other line must be the header.
    pub fn parse(text: &str, source: &str) -> Result<ClassSet, ClassFileError> {
        let fail = |line: usize, message: String| ClassFileError {
            source: source.to_string(),
            line,
            message,
        };
        let mut classes: Vec<ClassSpec> = Vec::new();
        let mut seen_header = false;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if !seen_header {
                let matches = fields.len() == HEADER.len()
                    && fields
                        .iter()
                        .zip(HEADER)
                        .all(|(f, h)| f.eq_ignore_ascii_case(h));
                if !matches {
                    return Err(fail(
                        line_no,
                        format!("expected the header `{}`, found `{line}`", HEADER.join(",")),
                    ));
                }
                seen_header = true;
                continue;
            }
            let spec = parse_class(&fields).map_err(|m| fail(line_no, m))?;
            if classes.iter().any(|c| c.id == spec.id) {
                return Err(fail(
                    line_no,
                    format!("class id {} is defined twice", spec.id),
                ));
            }
            classes.push(spec);
        }
        if !seen_header {
            return Err(fail(
                1,
                format!(
                    "empty class file: expected the header `{}`",
                    HEADER.join(",")
                ),
            ));
        }
        if !classes.iter().any(|c| c.id == 0) {
            // Open CAS always has class 0; a file that leaves it out gets the default one.
            classes.push(ClassSpec {
                id: 0,
                name: "unclassified".to_string(),
                rule: None,
                priority: 255,
                pinning: Pinning::None,
                allocation: 1.0,
            });
        }
        classes.sort_by_key(|c| c.id);
        let uses_key = classes
            .iter()
            .any(|c| c.rule.as_ref().is_some_and(Rule::uses_key));
        Ok(ClassSet { classes, uses_key })
    }

    /// The classes in ascending id; [`ClassIndex`] values index this slice.
    pub fn classes(&self) -> &[ClassSpec] {
        &self.classes
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Every name a `hint:NAME` rule of the file matches, in file order (may repeat).
    pub fn hint_names(&self) -> impl Iterator<Item = &[u8]> {
        self.classes
            .iter()
            .filter_map(|spec| spec.rule.as_ref())
            .flat_map(|rule| rule.hint_names())
    }

    /// Whether some rule looks at the key (otherwise callers may pass an empty key).
    pub fn uses_key(&self) -> bool {
        self.uses_key
    }

    /// The class of a request: the last matching class in id order, or the first matching
    /// class whose matching group says `done`; `unclassified` when none matches.
    #[inline]
    pub fn classify(&self, probe: &Probe) -> ClassIndex {
        let mut class = 0;
        for (index, spec) in self.classes.iter().enumerate() {
            let Some(rule) = &spec.rule else { continue };
            match rule.evaluate(probe) {
                RuleMatch::No => {}
                RuleMatch::Yes => class = index,
                RuleMatch::Done => return index as ClassIndex,
            }
        }
        class as ClassIndex
    }
}

fn parse_class(fields: &[&str]) -> Result<ClassSpec, String> {
    if fields.len() != HEADER.len() {
        return Err(format!(
            "expected 4 fields (id,rule,priority,allocation), found {}",
            fields.len()
        ));
    }
    let id: u8 = fields[0]
        .parse()
        .map_err(|_| format!("class id `{}` is not an integer in 0..=255", fields[0]))?;
    let name = fields[1];
    let rule = if id == 0 {
        if !name.eq_ignore_ascii_case("unclassified") {
            return Err(format!(
                "class 0 is the fallback and must be named `unclassified`, found `{name}`"
            ));
        }
        None
    } else if name.eq_ignore_ascii_case("unclassified") {
        return Err(format!("only class 0 may be `unclassified` (class {id})"));
    } else {
        Some(Rule::parse(name).map_err(|e| format!("class {id}: {e}"))?)
    };
    let (priority, pinning) = parse_priority(fields[2]).map_err(|e| format!("class {id}: {e}"))?;
    let allocation = if fields[3].is_empty() {
        1.0
    } else {
        let a: f64 = fields[3].parse().map_err(|_| {
            format!(
                "class {id}: allocation `{}` is not a number in [0, 1]",
                fields[3]
            )
        })?;
        if !(0.0..=1.0).contains(&a) {
            return Err(format!("class {id}: allocation {a} is outside [0, 1]"));
        }
        a
    };
    Ok(ClassSpec {
        id,
        name: name.to_string(),
        rule,
        priority,
        pinning,
        allocation,
    })
}

/// `N` (0..=255), empty (hard pin), or `soft` / `soft:N` (soft pin, N orders soft classes).
fn parse_priority(text: &str) -> Result<(u8, Pinning), String> {
    if text.is_empty() {
        return Ok((0, Pinning::Hard));
    }
    let number = |t: &str| {
        t.parse::<u8>()
            .map_err(|_| format!("eviction priority `{text}` is not an integer in 0..=255, empty (hard pin) or soft[:N]"))
    };
    if text.eq_ignore_ascii_case("soft") {
        return Ok((0, Pinning::Soft));
    }
    if let Some(n) = text.strip_prefix("soft:") {
        return Ok((number(n)?, Pinning::Soft));
    }
    Ok((number(text)?, Pinning::None))
}

/// Renders `key` in decimal into `buf` and returns the digits: how replay shows a 64-bit key
/// id to `key_prefix`/`key_glob` rules, without allocating.
#[inline]
pub fn decimal_key(key: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut k = key;
    loop {
        i -= 1;
        buf[i] = b'0' + (k % 10) as u8;
        k /= 10;
        if k == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_LIKE: &str = "\
# ldiskfs-like classes (seed 004)
IO class id,IO class name,Eviction priority,Allocation
0,unclassified,12,1
1,offset:lt:1048576&done,,0.1
8,size:le:4096,1,1
9,size:le:16384,2,1
18,size:gt:1073741824,11,0.05
";

    fn probe(size: u32, offset: u64) -> Probe<'static> {
        Probe {
            key: b"",
            size,
            offset,
            op: RuleOp::Access,
            hint: None,
        }
    }

    #[test]
    fn parses_the_open_cas_layout() {
        let set = ClassSet::parse(SEED_LIKE, "t.csv").unwrap();
        let ids: Vec<u8> = set.classes().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![0, 1, 8, 9, 18]);
        assert_eq!(set.classes()[1].pinning, Pinning::Hard);
        assert_eq!(set.classes()[1].allocation, 0.1);
        assert_eq!(set.classes()[2].priority, 1);
        assert!(!set.uses_key());
    }

    #[test]
    fn last_match_wins_unless_done() {
        let set = ClassSet::parse(SEED_LIKE, "t.csv").unwrap();
        // 4 KiB matches both size:le:4096 (index 2) and size:le:16384 (index 3): the later wins.
        assert_eq!(set.classify(&probe(4096, 1 << 30)), 3);
        assert_eq!(set.classify(&probe(8192, 1 << 30)), 3);
        // Metadata region: class 1 says done, so the size classes are not consulted.
        assert_eq!(set.classify(&probe(512, 4096)), 1);
        assert_eq!(set.classify(&probe(1 << 20, 1 << 30)), 0);
    }

    #[test]
    fn priorities_and_pinning() {
        assert_eq!(parse_priority(""), Ok((0, Pinning::Hard)));
        assert_eq!(parse_priority("soft"), Ok((0, Pinning::Soft)));
        assert_eq!(parse_priority("soft:7"), Ok((7, Pinning::Soft)));
        assert_eq!(parse_priority("255"), Ok((255, Pinning::None)));
        assert!(parse_priority("256").is_err());
        assert!(parse_priority("soft:x").is_err());
        let hard = ClassSpec {
            id: 1,
            name: String::new(),
            rule: None,
            priority: 0,
            pinning: Pinning::Hard,
            allocation: 1.0,
        };
        assert_eq!(hard.eviction_rank(), None);
        let soft = ClassSpec {
            pinning: Pinning::Soft,
            priority: 255,
            ..hard.clone()
        };
        let plain = ClassSpec {
            pinning: Pinning::None,
            priority: 0,
            ..hard
        };
        assert!(plain.eviction_rank() > soft.eviction_rank());
    }

    #[test]
    fn errors_name_the_line_and_reason() {
        let h = "IO class id,IO class name,Eviction priority,Allocation\n";
        for (body, line, needle) in [
            ("0,unclassified,1,1\n1,size:le:4,300,1\n", 3, "0..=255"),
            (
                "0,unclassified,1,1\n1,size:le:4,1,1.5\n",
                3,
                "outside [0, 1]",
            ),
            (
                "0,unclassified,1,1\n1,size:le:4,1,lots\n",
                3,
                "not a number",
            ),
            (
                "0,unclassified,1,1\n1,size:le:4,1\n",
                3,
                "expected 4 fields",
            ),
            ("1,size:le:4,1,1\n1,size:le:8,1,1\n", 3, "defined twice"),
            ("0,everything,1,1\n", 2, "must be named `unclassified`"),
            (
                "\n# c\n3,frobnicate:1,1,1\n",
                4,
                "unknown condition `frobnicate`",
            ),
            ("x,size:le:4,1,1\n", 2, "class id `x`"),
        ] {
            let err = ClassSet::parse(&format!("{h}{body}"), "f.csv").unwrap_err();
            assert_eq!(err.line, line, "{body}: {err}");
            assert!(err.to_string().contains(needle), "{body}: {err}");
            assert!(err.to_string().starts_with("f.csv: line "), "{err}");
        }
        let err = ClassSet::parse("id,name\n", "f.csv").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.message.contains("expected the header"));
    }

    #[test]
    fn missing_class_zero_gets_the_default() {
        let set = ClassSet::parse(
            "IO class id,IO class name,Eviction priority,Allocation\n2,key_prefix:1&done,,\n",
            "f",
        )
        .unwrap();
        assert_eq!(set.classes()[0].name, "unclassified");
        assert_eq!(set.classes()[1].allocation, 1.0);
        assert!(set.uses_key());
        let mut buf = [0u8; 20];
        let key = decimal_key(12345, &mut buf);
        assert_eq!(key, b"12345");
        let p = Probe {
            key,
            size: 1,
            offset: 0,
            op: RuleOp::Get,
            hint: None,
        };
        assert_eq!(set.classify(&p), 1);
        assert_eq!(decimal_key(0, &mut buf), b"0");
        assert_eq!(decimal_key(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
