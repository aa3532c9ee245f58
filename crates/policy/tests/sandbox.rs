//! Every attack a policy might try is contained: the tick fails with a clear message, the
//! host keeps running, and the engine stays usable.

mod common;

use common::*;
use policy::{Action, ErrorKind, Limits};

/// Runs `body` as the `when` callback and returns the failed tick's error.
fn attack(body: &str) -> policy::PolicyError {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let source =
        format!("function when()\n{body}\nreturn true end\nfunction howmuch() return 1 end");
    let mut e = engine_with(limits, "attack", &source);
    let out = tick(&mut e, 10.0);
    assert_eq!(
        out.decision.action,
        Action::None,
        "a failed tick takes no action"
    );
    let err = out.error.expect("the attack must fail the tick");
    assert_eq!(err.policy.to_string(), "attack@1");
    assert_eq!(err.callback, "when");
    err
}

#[test]
fn os_execute_is_unavailable() {
    let err = attack("os.execute('touch /tmp/mantle-pwned')");
    assert_eq!(err.kind, ErrorKind::Runtime);
    assert!(
        err.message
            .contains("attempt to index a nil value (global 'os')"),
        "{err}"
    );
    assert_eq!(err.line, Some(2));
}

#[test]
fn io_open_is_unavailable() {
    let err = attack("local f = io.open('/etc/passwd')");
    assert!(err.message.contains("(global 'io')"), "{err}");
}

#[test]
fn require_is_unavailable() {
    let err = attack("local m = require('os')");
    assert!(
        err.message
            .contains("attempt to call a nil value (global 'require')"),
        "{err}"
    );
}

#[test]
fn debug_is_unavailable() {
    let err = attack("debug.sethook()");
    assert!(err.message.contains("(global 'debug')"), "{err}");
}

#[test]
fn binary_chunks_cannot_be_loaded() {
    let err = attack("local f = load('\\27Lua\\84\\0\\25\\147\\13\\10\\26\\10')");
    assert!(
        err.message.contains("binary chunks are not allowed"),
        "{err}"
    );
    // string.dump, the usual way to make one, is gone too.
    let err = attack("local b = string.dump(function() end)");
    assert!(err.message.contains("field 'dump'"), "{err}");
}

#[test]
fn text_load_runs_inside_the_sandbox() {
    let err = attack("local f = load('return os.time()') f()");
    assert!(err.message.contains("(global 'os')"), "{err}");
}

#[test]
fn an_infinite_loop_runs_out_of_instructions() {
    let limits = Limits {
        instructions: 5_000_000,
        ..Limits::default()
    };
    let mut e = engine_with(limits, "spin", "function when()\n  while true do end\nend");
    let err = tick(&mut e, 1.0).error.unwrap();
    assert_eq!(err.kind, ErrorKind::InstructionBudget);
    assert!(
        err.message
            .contains("instruction budget of 5000000 instructions exceeded"),
        "{err}"
    );
    assert_eq!(err.line, Some(2));
}

#[test]
fn catching_the_budget_error_does_not_help() {
    let err = attack("while true do pcall(function() while true do end end) end");
    assert_eq!(err.kind, ErrorKind::InstructionBudget, "{err}");
}

#[test]
fn runaway_recursion_overflows_the_stack() {
    // Depending on frame size the Lua stack limit or the memory limit stops it first.
    let err = attack("local function f(n) return 1 + f(n + 1) end\nf(1)");
    assert!(
        err.message.contains("stack overflow") || err.kind == ErrorKind::Memory,
        "{err}"
    );
    let err = attack("local function f(n) local a, b, c = n, n, n return f(n + 1) + a end\nf(1)");
    assert!(
        err.message.contains("stack overflow") || err.message.contains("memory limit of"),
        "{err}"
    );
}

#[test]
fn a_string_bomb_hits_the_memory_limit() {
    let err = attack("local s = 'x'\nwhile true do s = s .. s end");
    assert_eq!(err.kind, ErrorKind::Memory, "{err}");
    assert!(
        err.message
            .contains("memory limit of 16777216 bytes exceeded"),
        "{err}"
    );
    let err = attack("local s = string.rep('x', 1 << 30)");
    assert_eq!(err.kind, ErrorKind::Memory, "{err}");
    let err = attack("local s = string.rep('x', 1 << 62)");
    assert!(err.message.contains("resulting string too large"), "{err}");
}

#[test]
fn a_table_bomb_hits_the_memory_limit() {
    let err = attack("local t = {}\nfor i = 1, 1e12 do t[i] = {i} end");
    assert_eq!(err.kind, ErrorKind::Memory, "{err}");
    assert!(err.message.contains("memory limit of"), "{err}");
}

#[test]
fn wrong_result_types_are_rejected_with_the_expected_shape() {
    let mut e = engine("bad", "function when() return 'yes' end");
    let err = tick(&mut e, 1.0).error.unwrap();
    assert_eq!(err.kind, ErrorKind::BadResult);
    assert_eq!(err.message, "when() must return a boolean, got string");

    let mut e = engine("bad", "function howmuch() return {size = 3} end");
    let err = tick(&mut e, 1.0).error.unwrap();
    assert_eq!(err.callback, "howmuch");
    assert!(err.message.contains("{capacity=N} or {evict=N}"), "{err}");

    let mut e = engine("bad", "function load() return 'heavy' end");
    let err = tick(&mut e, 1.0).error.unwrap();
    assert_eq!(err.message, "load() must return a number, got string");
}

#[test]
fn the_engine_recovers_after_a_contained_attack() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let src = "function when()\n if tick == 1 then local s = 'x' while true do s = s .. s end end\n return true end\nfunction howmuch() return 2 end";
    let mut e = engine_with(limits, "flaky", src);
    assert!(tick(&mut e, 5.0).error.is_some());
    let ok = tick(&mut e, 5.0);
    assert!(ok.error.is_none(), "{:?}", ok.error);
    assert_eq!(ok.decision.action, Action::Evict(2));
}
