//! Whether a hook function is straight-line code: no loop, no backward jump, no call, and at
//! most [`Limits::HOOK_STEP`] VM instructions, so one call of it runs each instruction at
//! most once. Such a hook can run without the instruction budget's count hook, which in Lua
//! 5.4 makes the VM trap before every instruction (about a tenth of a hook call's cost),
//! because it cannot run longer than the count hook lets any code run between two checks.
//!
//! What the bytecode does not show, metamethods written in Lua, is the caller's part: a
//! state in which a metatable was ever set from Lua must keep the count hook for every call
//! (see `ScriptHooks`).
//!
//! The code is read from the function's binary dump (`lua_dump`, stripped), whose layout is
//! Lua 5.4's `ldump.c`; anything unexpected in it answers "not straight-line".

use std::ffi::{c_int, c_void};

use mlua::ffi;

use crate::limits::Limits;

/// Whether the function on top of `l`'s stack is a Lua function of straight-line code (a C
/// function, or one whose dump cannot be read, is not).
///
/// # Safety
/// `l` is a valid state with a value on top of its stack; the stack is left as it was.
pub(crate) unsafe fn is_straight_line(l: *mut ffi::lua_State) -> bool {
    dump_of(l).is_some_and(|dump| function_of(&dump).is_some_and(|f| runs_once_through(&f.code)))
}

/// The stripped binary dump of the Lua function on top of `l`'s stack (`None` for a C
/// function or anything else).
///
/// # Safety
/// `l` is a valid state with a value on top of its stack; the stack is left as it was.
pub(crate) unsafe fn dump_of(l: *mut ffi::lua_State) -> Option<Vec<u8>> {
    if ffi::lua_type(l, -1) != ffi::LUA_TFUNCTION || ffi::lua_iscfunction(l, -1) != 0 {
        return None;
    }
    let mut dump: Vec<u8> = Vec::new();
    let data = &mut dump as *mut Vec<u8> as *mut c_void;
    (ffi::lua_dump(l, append, data, 1) == 0).then_some(dump)
}

/// `lua_dump`'s writer: appends to the `Vec<u8>` at `data`.
unsafe extern "C-unwind" fn append(
    _: *mut ffi::lua_State,
    bytes: *const c_void,
    len: usize,
    data: *mut c_void,
) -> c_int {
    let dump = &mut *(data as *mut Vec<u8>);
    dump.extend_from_slice(std::slice::from_raw_parts(bytes.cast::<u8>(), len));
    0
}

// Opcodes (Lua 5.4's `lopcodes.h`) that call or loop.
const OP_JMP: u32 = 56;
const OP_CALL: u32 = 68;
const OP_TAILCALL: u32 = 69;
const OP_FORLOOP: u32 = 73;
const OP_FORPREP: u32 = 74;
const OP_TFORPREP: u32 = 75;
const OP_TFORCALL: u32 = 76;
const OP_TFORLOOP: u32 = 77;
/// Bias of a jump's signed 25-bit offset (`OFFSET_sJ`).
const JUMP_BIAS: i64 = ((1 << 25) - 1) >> 1;

/// Whether `code` runs each of its instructions at most once and calls nothing: forward
/// jumps only, no loop instruction, no call, and no longer than one count-hook step.
fn runs_once_through(code: &[u32]) -> bool {
    code.len() <= Limits::HOOK_STEP as usize
        && code.iter().all(|&i| match i & 0x7f {
            OP_JMP => i64::from(i >> 7) - JUMP_BIAS >= 0,
            OP_CALL | OP_TAILCALL | OP_FORLOOP | OP_FORPREP | OP_TFORPREP | OP_TFORCALL
            | OP_TFORLOOP => false,
            _ => true,
        })
}

/// The top-level function of a stripped Lua 5.4 dump, as far as the readers here need it.
pub(crate) struct Function<'a> {
    /// Fixed parameters, and whether it takes `...` too.
    pub(crate) params: u8,
    pub(crate) vararg: bool,
    pub(crate) code: Vec<u32>,
    /// The dump after the code: its constants first (`ldump.c`'s `dumpConstants`).
    pub(crate) rest: &'a [u8],
}

/// The top-level function of a stripped Lua 5.4 dump.
pub(crate) fn function_of(dump: &[u8]) -> Option<Function<'_>> {
    // Signature, version 5.4, official format, the conversion check bytes, and the sizes of
    // an instruction (4), an integer and a float (8 each); then a check integer and float.
    const HEADER: &[u8] = b"\x1bLua\x54\x00\x19\x93\r\n\x1a\n\x04\x08\x08";
    let mut at = dump.strip_prefix(HEADER)?;
    at = at.get(8 + 8 + 1..)?; // check integer, check float, number of upvalues
    let source = varint(&mut at)?;
    at = at.get(source.saturating_sub(1)..)?; // 0: none; else length + 1
    varint(&mut at)?; // line defined
    varint(&mut at)?; // last line defined
    let (&[params, vararg, _stack], rest) = at.split_first_chunk::<3>()?;
    at = rest;
    let n = varint(&mut at)?;
    let bytes = at.get(..n.checked_mul(4)?)?;
    let code = bytes
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Some(Function {
        params,
        vararg: vararg != 0,
        code,
        rest: &at[bytes.len()..],
    })
}

/// The instructions of the top-level function of a stripped Lua 5.4 dump.
#[cfg(test)]
fn code_of(dump: &[u8]) -> Option<Vec<u32>> {
    function_of(dump).map(|f| f.code)
}

/// A size as `ldump.c`'s `dumpSize` writes it: 7 bits a byte, most significant first, the
/// last byte marked with 0x80.
pub(crate) fn varint(at: &mut &[u8]) -> Option<usize> {
    let mut x: usize = 0;
    loop {
        let (&b, rest) = at.split_first()?;
        *at = rest;
        x = x.checked_mul(128)? | usize::from(b & 0x7f);
        if b & 0x80 != 0 {
            return Some(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    fn straight(source: &str) -> bool {
        let lua = Lua::new();
        let f: mlua::Function = lua.load(source).eval().unwrap();
        lua.exec_raw_lua(|raw| unsafe {
            let l = raw.state();
            raw.push(f.clone()).unwrap();
            let answer = is_straight_line(l);
            ffi::lua_pop(l, 1);
            answer
        })
    }

    #[test]
    fn branches_field_reads_and_arithmetic_are_straight_line() {
        assert!(straight("function(o) return o.last_access end"));
        assert!(straight(
            "function(o) local p = o[1] * 2 + 1 if p > 3 and o.size < 10 then o[2] = p \
             elseif o.hits == 0 then o[3] = -p else o[4] = #tostring end return p, 2 end"
        ));
        assert!(straight(
            "function(o) local t = {o.id, x = 1} t.y = 'a' .. 'b' end"
        ));
    }

    #[test]
    fn loops_jumps_back_and_calls_are_not() {
        for source in [
            "function(o) while true do end end",
            "function(o) repeat o[1] = 1 until false end",
            "function(o) for i = 1, 10 do o[1] = i end end",
            "function(o) for k in pairs(o) do end end",
            "function(o) ::again:: if o[1] then goto again end end",
            "function(o) return f(o) end",
            "function(o) f(o) end",
            "function(o) o:m() end",
            "function(o) local s = ('x'):rep(3) end",
            "function(o) local g = function() while true do end end end",
        ] {
            let closure_only = source.contains("local g");
            assert_eq!(straight(source), closure_only, "{source}");
        }
        let lua = Lua::new();
        let c_function: mlua::Function = lua.globals().get("rawlen").unwrap();
        let straight_c = lua.exec_raw_lua(|raw| unsafe {
            raw.push(c_function.clone()).unwrap();
            let answer = is_straight_line(raw.state());
            ffi::lua_pop(raw.state(), 1);
            answer
        });
        assert!(!straight_c, "a C function's work is not its bytecode");
    }

    #[test]
    fn longer_than_one_hook_step_is_not() {
        let body = "o[1] = 1 ".repeat(Limits::HOOK_STEP as usize);
        assert!(!straight(&format!("function(o) {body} end")));
        assert!(straight("function(o) o[1] = 1 o[1] = 1 end"));
    }

    #[test]
    fn a_malformed_dump_reads_as_no_code() {
        assert_eq!(code_of(b""), None);
        assert_eq!(code_of(b"\x1bLua\x53"), None);
        let mut dump = b"\x1bLua\x54\x00\x19\x93\r\n\x1a\n\x04\x08\x08".to_vec();
        dump.extend([0; 17]);
        dump.extend([0x80, 0x80, 0x80, 0, 0, 2, 0x85]); // 5 instructions announced, none given
        assert_eq!(code_of(&dump), None);
    }
}
