//! How replay shows a trace request to the cache's class layer, and the per-class figures of
//! its report. The cache itself is `cache::Cache<L>`: the loop is generic over the layer, so
//! the unclassed replay is compiled without a class branch (`L = NoClasses`).

use cache::classes::{decimal_key, Probe, RuleOp};
use cache::{Cache, ClassFigures, ClassLayer};
use trace::{Op, Request};

/// The rule operation of a trace operation.
pub fn rule_op(op: Op) -> RuleOp {
    match op {
        Op::Get => RuleOp::Get,
        Op::Put => RuleOp::Put,
        Op::Delete => RuleOp::Delete,
        Op::Access => RuleOp::Access,
    }
}

/// The class of a trace request. Key rules see the key id in decimal (traces carry 64-bit
/// ids); traces carry no client hints, so `hint:` rules never match in replay. Without
/// classes nothing is looked at.
#[inline]
pub fn classify<L: ClassLayer>(cache: &Cache<L>, req: &Request) -> L::Class {
    if !L::CLASSED {
        return L::Class::default();
    }
    let mut buf = [0u8; 20];
    let key: &[u8] = if cache.layer().uses_key() {
        decimal_key(req.key, &mut buf)
    } else {
        b""
    };
    cache.classify(&Probe {
        key,
        size: req.size,
        offset: req.offset,
        op: rule_op(req.op),
        hint: None,
    })
}

/// Per-class figures for the report (`None` without classes).
pub fn class_reports<L: ClassLayer>(cache: &Cache<L>) -> Option<Vec<ClassReport>> {
    L::CLASSED.then(|| {
        cache
            .class_figures()
            .iter()
            .map(ClassReport::from)
            .collect()
    })
}

impl From<&ClassFigures> for ClassReport {
    fn from(f: &ClassFigures) -> Self {
        let s = f.stats;
        let lookups = s.hits + s.misses;
        ClassReport {
            id: f.id,
            rule: f.rule.clone(),
            priority: f.priority,
            pinning: f.pinning.to_string(),
            allocation: f.allocation,
            cap_objects: f.limit.objects,
            cap_bytes: f.limit.bytes,
            hit_ratio: (lookups > 0).then(|| s.hits as f64 / lookups as f64),
            stats: s,
        }
    }
}

/// One class in `replay --json`'s `classes` array: its settings, cap and counters.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClassReport {
    pub id: u8,
    pub rule: String,
    /// Null for hard-pinned classes.
    pub priority: Option<u8>,
    /// `none`, `soft` or `hard`.
    pub pinning: String,
    pub allocation: f64,
    pub cap_objects: Option<u64>,
    pub cap_bytes: Option<u64>,
    /// Of the lookups of requests in this class.
    pub hit_ratio: Option<f64>,
    /// Lookups, what is cached at the end of the run, evictions and refused insertions
    /// (`cache::ClassStats`; its fields are keys of this object).
    #[serde(flatten)]
    pub stats: cache::ClassStats,
}
