//! Values that cross between the host and a policy outside of metrics: `--param` settings and
//! the `WRstate` state. Both are small, flat and serialisable so the server can persist state
//! and the CLI can pass parameters as text.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::Limits;

/// A scalar a policy can see in `params` or keep in its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Number(f64),
    Str(String),
}

impl Scalar {
    /// Converts `--param` text: numbers and `true`/`false` become typed, the rest stays text.
    /// Text that reads as a number that is not finite (`nan`, `inf`, `1e999`) is refused:
    /// persisted as JSON it would come back as `null`, which is no scalar.
    pub fn from_text(text: &str) -> Result<Scalar, String> {
        Ok(match text {
            "true" => Scalar::Bool(true),
            "false" => Scalar::Bool(false),
            _ => match text.parse::<f64>() {
                Ok(n) => Scalar::finite(n).map_err(|e| format!("`{text}` {e}"))?,
                Err(_) => Scalar::Str(text.to_string()),
            },
        })
    }

    /// A number scalar, refused unless finite (NaN and the infinities cannot be stored).
    pub fn finite(n: f64) -> Result<Scalar, String> {
        if n.is_finite() {
            Ok(Scalar::Number(n))
        } else {
            Err(format!(
                "is the number {n}, which is not finite; only finite numbers can be kept"
            ))
        }
    }

    /// Whether the scalar can be persisted and read back (every number finite).
    pub fn is_storable(&self) -> bool {
        !matches!(self, Scalar::Number(n) if !n.is_finite())
    }

    pub(crate) fn into_lua(self, lua: &mlua::Lua) -> mlua::Result<mlua::Value> {
        Ok(match self {
            Scalar::Bool(b) => mlua::Value::Boolean(b),
            Scalar::Number(n) => number_to_lua(n),
            Scalar::Str(s) => mlua::Value::String(lua.create_string(&s)?),
        })
    }

    /// The scalar a Lua value stands for: `None` for values that are not scalars, an error
    /// for a number that is not finite.
    fn from_lua(value: &mlua::Value) -> Result<Option<Scalar>, String> {
        Ok(match value {
            mlua::Value::Boolean(b) => Some(Scalar::Bool(*b)),
            mlua::Value::Integer(i) => Some(Scalar::Number(*i as f64)),
            mlua::Value::Number(n) => Some(
                Scalar::finite(*n)
                    .map_err(|e| format!("WRstate: a value {e} (state is persisted)"))?,
            ),
            mlua::Value::String(s) => Some(Scalar::Str(s.to_string_lossy())),
            _ => None,
        })
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Number(n) => write!(f, "{n}"),
            Scalar::Str(s) => write!(f, "{s}"),
        }
    }
}

/// Integral numbers go to Lua as integers so `params.n` prints as `100`, not `100.0`, and
/// works as a table index.
pub(crate) fn number_to_lua(n: f64) -> mlua::Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        mlua::Value::Integer(n as i64)
    } else {
        mlua::Value::Number(n)
    }
}

/// Policy parameters (`--param k=v`), visible to the policy as `params`.
pub type Params = BTreeMap<String, Scalar>;

/// Parses one `k=v` parameter.
pub fn parse_param(text: &str) -> Result<(String, Scalar), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("parameter `{text}` is not of the form key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("parameter `{text}` has an empty key"));
    }
    if key.len() > Limits::MAX_PARAM_KEY_BYTES {
        return Err(format!(
            "parameter name is {} bytes; at most {} accepted",
            key.len(),
            Limits::MAX_PARAM_KEY_BYTES
        ));
    }
    let value = value.trim();
    if value.len() > Limits::MAX_PARAM_VALUE_BYTES {
        return Err(format!(
            "parameter `{key}` has a value of {} bytes; at most {} accepted",
            value.len(),
            Limits::MAX_PARAM_VALUE_BYTES
        ));
    }
    let scalar = Scalar::from_text(value).map_err(|e| format!("parameter `{key}`: {e}"))?;
    Ok((key.to_string(), scalar))
}

/// What `WRstate(v)` keeps: a scalar or a flat table of scalars. Survives reloads of the same
/// policy name; serialisable so a server can make it durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum StateValue {
    Scalar(Scalar),
    /// Key/value pairs of a flat table, in a deterministic order.
    Table(Vec<(Scalar, Scalar)>),
}

impl StateValue {
    /// Size charged against [`Limits::MAX_STATE_BYTES`]: string bytes plus 16 per scalar.
    fn scalar_size(value: &mlua::Value) -> usize {
        match value {
            mlua::Value::String(s) => s.as_bytes().len() + 16,
            _ => 16,
        }
    }

    pub(crate) fn from_lua(value: &mlua::Value) -> Result<StateValue, String> {
        let max = Limits::MAX_STATE_BYTES;
        let too_big = |size: usize| {
            format!(
                "WRstate: the state is larger than {max} bytes (at least {size}); keep it smaller"
            )
        };
        if !matches!(value, mlua::Value::Table(_)) {
            let size = Self::scalar_size(value);
            if size > max {
                return Err(too_big(size));
            }
        }
        if let Some(s) = Scalar::from_lua(value)? {
            return Ok(StateValue::Scalar(s));
        }
        let mlua::Value::Table(table) = value else {
            return Err(format!(
                "WRstate accepts a number, boolean, string or flat table, got {}",
                value.type_name()
            ));
        };
        let mut entries = Vec::new();
        let mut size = 0;
        for pair in table.pairs::<mlua::Value, mlua::Value>() {
            let (k, v) = pair.map_err(|e| e.to_string())?;
            // Checked before anything is copied, so a huge table costs no host memory.
            size += Self::scalar_size(&k) + Self::scalar_size(&v);
            if size > max {
                return Err(too_big(size));
            }
            match (Scalar::from_lua(&k)?, Scalar::from_lua(&v)?) {
                (Some(k), Some(v)) => entries.push((k, v)),
                _ => {
                    return Err(format!(
                        "WRstate tables must be flat (scalar keys and values), found a {} value",
                        v.type_name()
                    ))
                }
            }
        }
        entries.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
        Ok(StateValue::Table(entries))
    }

    pub(crate) fn into_lua(self, lua: &mlua::Lua) -> mlua::Result<mlua::Value> {
        match self {
            StateValue::Scalar(s) => s.into_lua(lua),
            StateValue::Table(entries) => {
                let t = lua.create_table()?;
                for (k, v) in entries {
                    t.raw_set(k.into_lua(lua)?, v.into_lua(lua)?)?;
                }
                Ok(mlua::Value::Table(t))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_convert_numbers_and_booleans() {
        assert_eq!(
            parse_param("n=100").unwrap(),
            ("n".into(), Scalar::Number(100.0))
        );
        assert_eq!(
            parse_param("on = true").unwrap(),
            ("on".into(), Scalar::Bool(true))
        );
        assert_eq!(
            parse_param("mode=lru").unwrap(),
            ("mode".into(), Scalar::Str("lru".into()))
        );
        assert!(parse_param("novalue").unwrap_err().contains("key=value"));
        assert!(parse_param("=3").unwrap_err().contains("empty key"));
    }

    #[test]
    fn non_finite_numbers_are_refused_naming_the_value() {
        for text in ["nan", "NaN", "inf", "-inf", "infinity", "1e999", "-1e999"] {
            let msg = parse_param(&format!("x={text}")).unwrap_err();
            assert!(msg.contains(&format!("`{text}`")), "{msg}");
            assert!(msg.contains("not finite"), "{msg}");
        }
        assert_eq!(
            parse_param("x=1e300").unwrap().1,
            Scalar::Number(1e300),
            "large finite numbers stay numbers"
        );
    }

    #[test]
    fn every_storable_state_reads_back() {
        let lua = mlua::Lua::new();
        for bad in ["0/0", "math.huge", "-math.huge", "{a = 0/0}", "{[1] = 1/0}"] {
            let value: mlua::Value = lua.load(format!("return {bad}")).eval().unwrap();
            let msg = StateValue::from_lua(&value).unwrap_err();
            assert!(msg.contains("not finite"), "{bad}: {msg}");
        }
        let value: mlua::Value = lua.load("return {a = 1.5, b = 'x'}").eval().unwrap();
        let state = StateValue::from_lua(&value).unwrap();
        let json = serde_json::to_vec(&state).unwrap();
        assert_eq!(serde_json::from_slice::<StateValue>(&json).unwrap(), state);
    }

    #[test]
    fn state_round_trips_through_json() {
        let state = StateValue::Table(vec![
            (Scalar::Number(1.0), Scalar::Str("a".into())),
            (Scalar::Str("absorbed".into()), Scalar::Bool(true)),
        ]);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(serde_json::from_str::<StateValue>(&json).unwrap(), state);
    }
}
