//! Redis's conversion rules between Lua values and protocol replies, both ways, with bounds:
//! a function can build a table that refers to itself or a reply of any size, so converting
//! is limited in depth and in bytes, and an over-limit reply becomes an error, never a crash.

use crate::frame::Frame;
use bytes::Bytes;
use policy::mlua::{self, Lua, Table, Value};

/// Nesting of a reply a function may return (deeper tables, including a table holding
/// itself, are refused).
pub const MAX_REPLY_DEPTH: usize = 32;

/// A Lua value a function returned, as a reply (Redis 7's rules): an integer or a number
/// (truncated) is an integer, a string a bulk string, `true` is 1, `false` and `nil` are a
/// null, a table with `err` an error, one with `ok` a status, any other table an array of
/// its elements up to the first `nil`. `budget` is the bytes the reply may take.
pub fn to_frame(value: &Value, budget: &mut u64) -> Result<Frame, String> {
    to_frame_at(value, budget, 0)
}

fn take(budget: &mut u64, bytes: usize) -> Result<(), String> {
    let bytes = bytes as u64 + 16;
    if bytes > *budget {
        return Err(
            "ERR the function's reply exceeds the reply size limit (client-output-limit, at most \
             the function memory limit)"
                .into(),
        );
    }
    *budget -= bytes;
    Ok(())
}

fn to_frame_at(value: &Value, budget: &mut u64, depth: usize) -> Result<Frame, String> {
    Ok(match value {
        Value::Integer(n) => {
            take(budget, 0)?;
            Frame::Integer(*n)
        }
        Value::Number(n) => {
            take(budget, 0)?;
            Frame::Integer(if n.is_finite() { *n as i64 } else { 0 })
        }
        Value::String(s) => {
            let bytes = s.as_bytes();
            take(budget, bytes.len())?;
            Frame::Bulk(Bytes::copy_from_slice(&bytes))
        }
        Value::Boolean(true) => Frame::Integer(1),
        Value::Table(table) => {
            if depth >= MAX_REPLY_DEPTH {
                return Err(format!(
                    "ERR the function's reply is nested deeper than {MAX_REPLY_DEPTH} levels"
                ));
            }
            if let Some(error) = field(table, "err") {
                take(budget, error.len())?;
                return Ok(Frame::Error(error_line(&error)));
            }
            if let Some(status) = field(table, "ok") {
                take(budget, status.len())?;
                return Ok(Frame::Simple(Bytes::from(status)));
            }
            let mut items = Vec::new();
            for i in 1.. {
                let item: Value = table.raw_get(i).map_err(|e| format!("ERR {e}"))?;
                if item.is_nil() {
                    break;
                }
                take(budget, 0)?;
                items.push(to_frame_at(&item, budget, depth + 1)?);
            }
            Frame::Array(items)
        }
        _ => Frame::Null,
    })
}

/// A table's string field `name` (`err`, `ok`), as Redis reads it.
fn field(table: &Table, name: &str) -> Option<String> {
    match table.raw_get::<Value>(name).ok()? {
        Value::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        _ => None,
    }
}

/// An error message as a reply line: one line, with an error code (`ERR` when it has none).
pub fn error_line(message: &str) -> String {
    let line: String = message
        .trim_start_matches('-')
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    let has_code = line
        .split(' ')
        .next()
        .is_some_and(|code| !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()));
    if has_code {
        line
    } else {
        format!("ERR {line}")
    }
}

/// A command's reply as the Lua value `redis.call` returns: an integer a number, a bulk
/// string a string, a null `false`, a status `{ok=...}`, an error `{err=...}` (the caller
/// raises it or, for `redis.pcall`, returns it), an array a table. A RESP3 map arrives flat.
pub fn to_lua(lua: &Lua, frame: Frame) -> mlua::Result<Value> {
    Ok(match frame {
        Frame::Integer(n) => Value::Integer(n),
        Frame::Bulk(data) | Frame::Verbatim(data) => Value::String(lua.create_string(&data)?),
        Frame::Value(value) => Value::String(lua.create_string(value.as_ref())?),
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Simple(text) => {
            let table = lua.create_table()?;
            table.raw_set("ok", lua.create_string(&text)?)?;
            Value::Table(table)
        }
        Frame::Error(text) => error_table(lua, &text)?,
        Frame::Pair(a, b) => Value::Table(lua.create_sequence_from([a, b])?),
        Frame::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        Frame::Map(pairs) => {
            let table = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            let mut i = 0;
            for (key, value) in pairs {
                table.raw_set(i + 1, to_lua(lua, key)?)?;
                table.raw_set(i + 2, to_lua(lua, value)?)?;
                i += 2;
            }
            Value::Table(table)
        }
    })
}

/// `{err = text}`: how an error travels through Lua.
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.raw_set("err", lua.create_string(text)?)?;
    Ok(Value::Table(table))
}

/// The arguments of `redis.call`: strings and numbers only, as Redis requires.
pub fn to_args(values: mlua::MultiValue) -> Result<Vec<Bytes>, String> {
    if values.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    values
        .into_iter()
        .map(|value| match value {
            Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
            Value::Integer(n) => Ok(Bytes::from(n.to_string())),
            Value::Number(n) => Ok(Bytes::from(format_number(n))),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers".into()),
        })
        .collect()
}

/// A Lua number as Redis's `redis.call` passes it (`%.17g`, integral values without a point).
fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(code: &str) -> Result<Frame, String> {
        let lua = Lua::new();
        let value: Value = lua.load(code).eval().unwrap();
        to_frame(&value, &mut 1_000_000)
    }

    #[test]
    fn lua_values_become_replies_as_in_redis() {
        assert_eq!(eval("return 3.9").unwrap(), Frame::Integer(3));
        assert_eq!(eval("return 'x'").unwrap(), Frame::Bulk("x".into()));
        assert_eq!(eval("return true").unwrap(), Frame::Integer(1));
        assert_eq!(eval("return false").unwrap(), Frame::Null);
        assert_eq!(eval("return nil").unwrap(), Frame::Null);
        assert_eq!(
            eval("return {1, 'a', nil, 3}").unwrap(),
            Frame::Array(vec![Frame::Integer(1), Frame::Bulk("a".into())])
        );
        assert_eq!(
            eval("return {ok='FINE'}").unwrap(),
            Frame::Simple("FINE".into())
        );
        assert_eq!(
            eval("return {err='bad thing'}").unwrap(),
            Frame::Error("ERR bad thing".into())
        );
        assert_eq!(
            eval("return {err='WRONGTYPE no'}").unwrap(),
            Frame::Error("WRONGTYPE no".into())
        );
    }

    #[test]
    fn self_referencing_and_oversized_replies_are_errors() {
        assert!(eval("local t = {}; t[1] = t; return t")
            .unwrap_err()
            .contains("nested deeper"));
        let lua = Lua::new();
        let value: Value = lua.load("return string.rep('x', 1000)").eval().unwrap();
        assert!(to_frame(&value, &mut 100)
            .unwrap_err()
            .contains("reply size limit"));
    }

    #[test]
    fn replies_become_lua_values_as_in_redis() {
        let lua = Lua::new();
        let value = to_lua(&lua, Frame::Null).unwrap();
        assert_eq!(value, Value::Boolean(false));
        let Value::Table(t) = to_lua(&lua, Frame::ok()).unwrap() else {
            panic!()
        };
        assert_eq!(t.get::<String>("ok").unwrap(), "OK");
    }
}
