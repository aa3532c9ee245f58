//! Whether a `priority` hook only hands back what the host already holds: a function of one
//! parameter whose code is `return obj.FIELD` or `return obj.FIELD, obj[i]` (any mix of
//! `obj`'s fields and user numbers, one or two results), like `policies/hooks/lru.lua`'s
//! `return obj.last_access` and `arc.lua`'s `return obj.last_access, obj[1]`.
//!
//! Such a hook's results are the host's own numbers, so the host reads them from its record
//! instead of running the VM: a Lua call costs about 750 machine instructions a request
//! (the protected call, the field store into `obj`, the result checks), the read a few. The
//! results are the same, and so is every check made of them (NaN, the queue number): the
//! code cannot fail, loop, allocate or reach other Lua code (`obj`'s metatable is the host's
//! and protected; its fields are stored by the host before every call or answered by that
//! metatable). The one way a file can make `obj[i]` read something else, `rawset(obj, i,
//! v)`, is checked for at each read (the caller then runs the hook).
//!
//! The code is read from the function's stripped dump ([`crate::straight_line`]);
//! anything else in it answers "not a projection", and the hook runs as any other.

use crate::straight_line::{function_of, varint};

/// One result of a projection: a field of `obj` (its index in the hooks' field list) or a
/// user number (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Field(usize),
    User(usize),
}

/// The results of a projection hook, in order (the second, if any, is `None` when absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Projection {
    pub(crate) first: Source,
    pub(crate) second: Option<Source>,
}

// Opcodes and a register-argument instruction's fields (Lua 5.4's `lopcodes.h`).
const OP_GETI: u32 = 13;
const OP_GETFIELD: u32 = 14;
const OP_RETURN: u32 = 70;
const OP_RETURN1: u32 = 72;

fn op(i: u32) -> u32 {
    i & 0x7f
}
fn a(i: u32) -> u32 {
    (i >> 7) & 0xff
}
fn k(i: u32) -> u32 {
    (i >> 15) & 1
}
fn b(i: u32) -> u32 {
    (i >> 16) & 0xff
}
fn c(i: u32) -> u32 {
    (i >> 24) & 0xff
}

/// The projection `dump` (a stripped dump of the hook) computes, if it is one; `fields` are
/// the names of `obj`'s fields, `users` how many user numbers there are.
pub(crate) fn projection_of(dump: &[u8], fields: &[&str], users: usize) -> Option<Projection> {
    let f = function_of(dump)?;
    if f.params != 1 || f.vararg {
        return None;
    }
    let constants = short_strings(f.rest)?;
    // R0 is `obj`; the results are loaded into R1, R2 and returned from R1.
    let load = |i: u32, register: u32| -> Option<Source> {
        if a(i) != register || b(i) != 0 || k(i) != 0 {
            return None;
        }
        match op(i) {
            OP_GETFIELD => {
                let name = constants.get(c(i) as usize)?.as_deref()?;
                fields.iter().position(|&f| f == name).map(Source::Field)
            }
            OP_GETI => {
                let index = c(i) as usize;
                (1..=users)
                    .contains(&index)
                    .then(|| Source::User(index - 1))
            }
            _ => None,
        }
    };
    match f.code.as_slice() {
        [one, ret, ..] if op(*ret) == OP_RETURN1 && a(*ret) == 1 => Some(Projection {
            first: load(*one, 1)?,
            second: None,
        }),
        [one, two, ret, ..] if op(*ret) == OP_RETURN && a(*ret) == 1 && b(*ret) == 3 => {
            Some(Projection {
                first: load(*one, 1)?,
                second: Some(load(*two, 2)?),
            })
        }
        _ => None,
    }
}

/// The constants of a dump's function (its bytes after the code), each a string or `None`
/// for any other kind; `None` if they cannot be read.
fn short_strings(mut at: &[u8]) -> Option<Vec<Option<String>>> {
    // Type tags of `ldump.c`'s constants (`lobject.h`).
    const NIL: u8 = 0;
    const FALSE: u8 = 1;
    const TRUE: u8 = 17;
    const INTEGER: u8 = 3;
    const FLOAT: u8 = 19;
    const SHORT_STRING: u8 = 4;
    const LONG_STRING: u8 = 20;
    let n = varint(&mut at)?;
    let mut constants = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        let (&tag, rest) = at.split_first()?;
        at = rest;
        constants.push(match tag {
            NIL | FALSE | TRUE => None,
            INTEGER | FLOAT => {
                at = at.get(8..)?;
                None
            }
            SHORT_STRING | LONG_STRING => {
                let len = varint(&mut at)?.checked_sub(1)?;
                let bytes = at.get(..len)?;
                at = &at[len..];
                Some(String::from_utf8_lossy(bytes).into_owned())
            }
            _ => return None,
        });
    }
    Some(constants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::straight_line::dump_of;
    use mlua::{ffi, Lua};

    const FIELDS: [&str; 5] = ["id", "size", "hits", "last_access", "inserted"];

    fn projection(source: &str) -> Option<Projection> {
        let lua = Lua::new();
        let f: mlua::Function = lua.load(source).eval().unwrap();
        lua.exec_raw_lua(|raw| unsafe {
            raw.push(f.clone()).unwrap();
            let dump = dump_of(raw.state());
            ffi::lua_pop(raw.state(), 1);
            projection_of(&dump.unwrap(), &FIELDS, 4)
        })
    }

    #[test]
    fn field_and_user_number_returns_are_projections() {
        assert_eq!(
            projection("function(obj) return obj.last_access end"),
            Some(Projection {
                first: Source::Field(3),
                second: None
            })
        );
        assert_eq!(
            projection("function(o) return o.last_access, o[1] end"),
            Some(Projection {
                first: Source::Field(3),
                second: Some(Source::User(0))
            })
        );
        assert_eq!(
            projection("function(o) return o[4], o.size end"),
            Some(Projection {
                first: Source::User(3),
                second: Some(Source::Field(1))
            })
        );
        assert_eq!(
            projection("function(o) local x = 'pad' return o.hits end"),
            None,
            "code before the read: run it"
        );
    }

    #[test]
    fn anything_else_is_not() {
        for source in [
            "function(o) return o.last_access + 0 end",
            "function(o) return -o.last_access end",
            "function(o) return o.nope end",
            "function(o) return o[5] end",
            "function(o) return o[0] end",
            "function(o) return o['last_access'] .. '' end",
            "function(o) return x.last_access end",
            "function(o, p) return o.last_access end",
            "function(...) local o = ... return o.last_access end",
            "function(o) return o.last_access, o[1], o[2] end",
            "function(o) o[1] = 1 return o.last_access end",
            "function(o) return end",
            "function(o) return 1 end",
            "function(o) return o end",
            "function(o) return o.size.x end",
        ] {
            assert_eq!(projection(source), None, "{source}");
        }
    }

    #[test]
    fn a_malformed_dump_is_not() {
        assert_eq!(projection_of(b"", &FIELDS, 4), None);
        assert_eq!(
            short_strings(&[0x81, 4, 0x85, b'a']),
            None,
            "truncated string"
        );
        assert_eq!(short_strings(&[0x81, 99]), None, "unknown tag");
        assert_eq!(
            short_strings(&[0x82, 4, 0x82, b'a', 3, 1, 0, 0, 0, 0, 0, 0, 0]),
            Some(vec![Some("a".into()), None])
        );
    }
}
