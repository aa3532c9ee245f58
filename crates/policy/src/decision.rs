//! What a tick decides, and the validation of callback results. Every value a policy returns
//! is checked here so the host only ever sees well-formed actions.

use serde::Serialize;

use crate::limits::Limits;

/// The action a tick asks of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
#[serde(tag = "kind", content = "n", rename_all = "snake_case")]
pub enum Action {
    /// Leave the cache alone.
    #[default]
    None,
    /// Evict this many objects now, from the cold end.
    Evict(u64),
    /// Set the cache's target capacity to this many objects.
    SetCapacity(u64),
}

/// Everything one tick decided.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Decision {
    /// This server's load: `load()`'s result, else the host's `load` metric.
    pub load: f64,
    /// `when()`'s result; `None` when the policy has no `when` (treated as true).
    pub when: Option<bool>,
    /// `howmuch()`'s result, `None` when `when()` said no or there is no `howmuch`.
    pub action: Action,
    /// `where()`'s (or a Ceph-dialect chunk's) targets: load to send to each server index.
    /// Entries with a zero amount are dropped; sorted by server.
    pub targets: Vec<(usize, f64)>,
    /// Slot ranges (first, last) `howmuch()` chose as the units to export, sorted; empty when
    /// it left the choice to the host. A balancing host sends only whole units.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<(u16, u16)>,
}

impl Decision {
    /// Whether the decision asks anything of the host.
    pub fn acts(&self) -> bool {
        self.action != Action::None || !self.targets.is_empty()
    }
}

/// A number of objects to evict: rounded down; anything past [`Limits::MAX_COUNT`] (infinity
/// included) means "everything" and is kept at that bound, so reports never wrap.
fn count_from_number(n: f64, what: &str) -> Result<u64, String> {
    if n.is_nan() {
        return Err(format!("{what} is NaN"));
    }
    if n < 0.0 {
        return Err(format!("{what} is negative ({n})"));
    }
    Ok(if n >= Limits::MAX_COUNT as f64 {
        Limits::MAX_COUNT
    } else {
        n as u64
    })
}

/// A target capacity in objects: a whole number from 1 to [`Limits::MAX_COUNT`]. Zero would
/// read as "unlimited" where capacities are configured, and a value past the bound cannot be
/// reported exactly, so both are the policy's error rather than a silent reinterpretation.
fn capacity_from_number(n: f64) -> Result<u64, String> {
    const WHAT: &str = "howmuch() capacity";
    if n.is_nan() {
        return Err(format!("{WHAT} is NaN"));
    }
    if n < 1.0 {
        return Err(format!(
            "{WHAT} must be at least 1 object, got {n} (there is no unlimited capacity from a \
             policy; return a large count instead)"
        ));
    }
    if n > Limits::MAX_COUNT as f64 {
        return Err(format!(
            "{WHAT} must be at most {} objects, got {n}",
            Limits::MAX_COUNT
        ));
    }
    Ok(n as u64)
}

fn number(value: &mlua::Value) -> Option<f64> {
    match value {
        mlua::Value::Integer(i) => Some(*i as f64),
        mlua::Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// `load()` must return a finite number.
pub(crate) fn parse_load(value: &mlua::Value) -> Result<f64, String> {
    match number(value) {
        Some(n) if n.is_finite() => Ok(n),
        Some(n) => Err(format!("load() must return a finite number, got {n}")),
        None => Err(format!(
            "load() must return a number, got {}",
            value.type_name()
        )),
    }
}

/// `when()` must return a boolean.
pub(crate) fn parse_when(value: &mlua::Value) -> Result<bool, String> {
    match value {
        mlua::Value::Boolean(b) => Ok(*b),
        other => Err(format!(
            "when() must return a boolean, got {}",
            other.type_name()
        )),
    }
}

/// `howmuch()` returns a number of objects to evict, `{capacity=N}`, `{evict=N}` or nil.
pub(crate) fn parse_howmuch(value: &mlua::Value) -> Result<Action, String> {
    if let Some(n) = number(value) {
        let n = count_from_number(n, "howmuch() result")?;
        return Ok(if n == 0 {
            Action::None
        } else {
            Action::Evict(n)
        });
    }
    match value {
        mlua::Value::Nil => Ok(Action::None),
        mlua::Value::Table(t) => {
            let capacity: mlua::Value = t.raw_get("capacity").map_err(|e| e.to_string())?;
            let evict: mlua::Value = t.raw_get("evict").map_err(|e| e.to_string())?;
            match (number(&capacity), number(&evict), &capacity, &evict) {
                (Some(_), Some(_), _, _) => {
                    Err("howmuch() table must set either capacity or evict, not both".into())
                }
                (Some(c), None, _, mlua::Value::Nil) => {
                    Ok(Action::SetCapacity(capacity_from_number(c)?))
                }
                (None, Some(e), mlua::Value::Nil, _) => {
                    let e = count_from_number(e, "howmuch() evict")?;
                    Ok(if e == 0 {
                        Action::None
                    } else {
                        Action::Evict(e)
                    })
                }
                _ => Err(format!(
                    "howmuch() table must be {{capacity=N}} or {{evict=N}} with a number, got \
                     capacity={} evict={}",
                    capacity.type_name(),
                    evict.type_name()
                )),
            }
        }
        other => Err(format!(
            "howmuch() must return a number, {{capacity=N}} or {{evict=N}}, got {}",
            other.type_name()
        )),
    }
}

/// Highest slot number of the cluster's key space (16,384 slots).
const MAX_SLOT: u16 = 16_383;
/// Most slot ranges one `howmuch()` may name.
const MAX_UNITS: usize = 1024;

/// `howmuch()`'s result with the balancing form: a list of slot ranges (`{3, {10, 12},
/// {first=20, last=25}}`, entries of `slots()` included) names the units to export; every
/// other form is [`parse_howmuch`]'s.
pub(crate) fn parse_howmuch_units(
    value: &mlua::Value,
) -> Result<(Action, Vec<(u16, u16)>), String> {
    if let mlua::Value::Table(t) = value {
        let first: mlua::Value = t.raw_get(1).map_err(|e| e.to_string())?;
        if !first.is_nil() {
            return Ok((Action::None, parse_units(t)?));
        }
    }
    Ok((parse_howmuch(value)?, Vec::new()))
}

fn parse_units(list: &mlua::Table) -> Result<Vec<(u16, u16)>, String> {
    let n = list.raw_len();
    if n > MAX_UNITS {
        return Err(format!(
            "howmuch() names {n} slot ranges; at most {MAX_UNITS}"
        ));
    }
    let slot = |v: &mlua::Value, i: usize| -> Result<u16, String> {
        match number(v) {
            Some(s) if s >= 0.0 && s.fract() == 0.0 && s <= f64::from(MAX_SLOT) => Ok(s as u16),
            _ => Err(format!(
                "howmuch() slot range {i}: a slot must be a whole number 0..{MAX_SLOT}, got {}",
                describe(v)
            )),
        }
    };
    let mut units = Vec::with_capacity(n);
    for i in 1..=n {
        let entry: mlua::Value = list.raw_get(i).map_err(|e| e.to_string())?;
        let (first, last) = match &entry {
            mlua::Value::Table(t) => {
                let named: mlua::Value = t.raw_get("first").map_err(|e| e.to_string())?;
                let (a, b): (mlua::Value, mlua::Value) = if named.is_nil() {
                    let a: mlua::Value = t.raw_get(1).map_err(|e| e.to_string())?;
                    let b: mlua::Value = t.raw_get(2).map_err(|e| e.to_string())?;
                    (a.clone(), if b.is_nil() { a } else { b })
                } else {
                    let b: mlua::Value = t.raw_get("last").map_err(|e| e.to_string())?;
                    (named.clone(), if b.is_nil() { named } else { b })
                };
                (slot(&a, i)?, slot(&b, i)?)
            }
            other => {
                let s = slot(other, i)?;
                (s, s)
            }
        };
        if first > last {
            return Err(format!(
                "howmuch() slot range {i}: first slot {first} is after last slot {last}"
            ));
        }
        units.push((first, last));
    }
    units.sort_unstable();
    if let Some(w) = units.windows(2).find(|w| w[1].0 <= w[0].1) {
        return Err(format!(
            "howmuch() slot ranges {}-{} and {}-{} overlap",
            w[0].0, w[0].1, w[1].0, w[1].1
        ));
    }
    Ok(units)
}

/// `where()` (and a Ceph chunk) returns `{[server]=amount}` with 0-based server indices.
pub(crate) fn parse_targets(
    value: &mlua::Value,
    servers: usize,
    what: &str,
) -> Result<Vec<(usize, f64)>, String> {
    let table = match value {
        mlua::Value::Nil => return Ok(Vec::new()),
        mlua::Value::Table(t) => t,
        other => {
            return Err(format!(
                "{what} must return a table {{[server]=amount}}, got {}",
                other.type_name()
            ))
        }
    };
    let mut targets = Vec::new();
    for pair in table.clone().pairs::<mlua::Value, mlua::Value>() {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        let server = match number(&k) {
            Some(s) if s >= 0.0 && s.fract() == 0.0 && (s as usize) < servers => s as usize,
            _ => {
                return Err(format!(
                    "{what} target key must be a server index 0..{}, got {}",
                    servers.saturating_sub(1),
                    describe(&k)
                ))
            }
        };
        let amount = match number(&v) {
            Some(a) if a.is_finite() && a >= 0.0 => a,
            _ => {
                return Err(format!(
                    "{what} target for server {server} must be a non-negative number, got {}",
                    describe(&v)
                ))
            }
        };
        if amount > 0.0 {
            targets.push((server, amount));
        }
    }
    targets.sort_by_key(|t| t.0);
    Ok(targets)
}

fn describe(v: &mlua::Value) -> String {
    match v {
        mlua::Value::Integer(i) => i.to_string(),
        mlua::Value::Number(n) => n.to_string(),
        mlua::Value::String(s) => {
            // Only a short prefix is copied out of Lua.
            let bytes = s.as_bytes();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned();
            let more = if bytes.len() > 64 { "..." } else { "" };
            format!("\"{text}{more}\"")
        }
        other => other.type_name().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str) -> (mlua::Lua, mlua::Value) {
        let lua = mlua::Lua::new();
        let v = lua.load(src).eval::<mlua::Value>().unwrap();
        (lua, v)
    }

    #[test]
    fn howmuch_accepts_numbers_and_both_table_forms() {
        assert_eq!(parse_howmuch(&eval("return 5").1), Ok(Action::Evict(5)));
        assert_eq!(parse_howmuch(&eval("return 2.9").1), Ok(Action::Evict(2)));
        assert_eq!(parse_howmuch(&eval("return 0").1), Ok(Action::None));
        assert_eq!(parse_howmuch(&eval("return nil").1), Ok(Action::None));
        assert_eq!(
            parse_howmuch(&eval("return {capacity=100}").1),
            Ok(Action::SetCapacity(100))
        );
        assert_eq!(
            parse_howmuch(&eval("return {evict=3}").1),
            Ok(Action::Evict(3))
        );
    }

    #[test]
    fn howmuch_rejects_malformed_results() {
        let msg = parse_howmuch(&eval("return 'ten'").1).unwrap_err();
        assert!(msg.contains("got string"), "{msg}");
        let msg = parse_howmuch(&eval("return -1").1).unwrap_err();
        assert!(msg.contains("negative"), "{msg}");
        let msg = parse_howmuch(&eval("return {capacity=1, evict=2}").1).unwrap_err();
        assert!(msg.contains("not both"), "{msg}");
        let msg = parse_howmuch(&eval("return {size=1}").1).unwrap_err();
        assert!(msg.contains("{capacity=N} or {evict=N}"), "{msg}");
        let msg = parse_howmuch(&eval("return 0/0").1).unwrap_err();
        assert!(msg.contains("NaN"), "{msg}");
    }

    #[test]
    fn capacities_outside_one_to_max_count_are_errors() {
        for bad in ["0", "0.5", "-3", "0/0", "-math.huge"] {
            let msg = parse_howmuch(&eval(&format!("return {{capacity={bad}}}")).1).unwrap_err();
            assert!(msg.contains("capacity"), "{bad}: {msg}");
        }
        for bad in ["1e300", "math.huge", "2^53 + 2"] {
            let msg = parse_howmuch(&eval(&format!("return {{capacity={bad}}}")).1).unwrap_err();
            assert!(msg.contains("at most 9007199254740992"), "{bad}: {msg}");
        }
        assert_eq!(
            parse_howmuch(&eval("return {capacity=2^53}").1),
            Ok(Action::SetCapacity(1 << 53))
        );
        assert_eq!(
            parse_howmuch(&eval("return {evict=1e300}").1),
            Ok(Action::Evict(Limits::MAX_COUNT))
        );
        assert_eq!(
            parse_howmuch(&eval("return math.huge").1),
            Ok(Action::Evict(Limits::MAX_COUNT))
        );
        assert!(i64::try_from(Limits::MAX_COUNT).is_ok());
    }

    #[test]
    fn when_and_load_check_types() {
        assert_eq!(parse_when(&eval("return true").1), Ok(true));
        assert!(parse_when(&eval("return 1").1)
            .unwrap_err()
            .contains("must return a boolean, got integer"));
        assert_eq!(parse_load(&eval("return 1.5").1), Ok(1.5));
        assert!(parse_load(&eval("return {}").1)
            .unwrap_err()
            .contains("got table"));
    }

    #[test]
    fn howmuch_may_name_slot_ranges() {
        let units = |src: &str| parse_howmuch_units(&eval(src).1);
        assert_eq!(
            units("return {20, {3, 5}, {first = 9, last = 9, load = 1.5}, {first = 12}}"),
            Ok((Action::None, vec![(3, 5), (9, 9), (12, 12), (20, 20)]))
        );
        assert_eq!(units("return {evict = 3}"), Ok((Action::Evict(3), vec![])));
        assert_eq!(units("return 4"), Ok((Action::Evict(4), vec![])));
        for (src, says) in [
            ("return {16384}", "0..16383"),
            ("return {-1}", "0..16383"),
            ("return {1.5}", "0..16383"),
            ("return {'x'}", "0..16383"),
            ("return {{7, 3}}", "after last slot"),
            ("return {{1, 5}, {5, 6}}", "overlap"),
        ] {
            let msg = units(src).unwrap_err();
            assert!(msg.contains(says), "{src}: {msg}");
        }
        let many = units("local t = {} for i = 0, 2000 do t[#t + 1] = i end return t");
        assert!(many.unwrap_err().contains("at most 1024"));
    }

    #[test]
    fn targets_are_validated_against_the_server_count() {
        let (_l, v) = eval("return {[0]=0, [1]=2.5}");
        assert_eq!(parse_targets(&v, 2, "where()"), Ok(vec![(1, 2.5)]));
        let (_l, v) = eval("return {[5]=1}");
        let msg = parse_targets(&v, 2, "where()").unwrap_err();
        assert!(msg.contains("server index 0..1, got 5"), "{msg}");
        let (_l, v) = eval("return {[1]='x'}");
        assert!(parse_targets(&v, 2, "where()")
            .unwrap_err()
            .contains("non-negative number"));
    }
}
