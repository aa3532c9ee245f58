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

// ---- Unmetered work: every way policy code runs must meet the budget or the time limit. ----

/// Runs `body` as `when()` on its own thread under a small budget and returns the tick's
/// error; fails the test (instead of hanging it) if the tick does not end within a minute.
fn bounded_attack(body: &str) -> policy::PolicyError {
    let limits = Limits {
        instructions: 5_000_000,
        memory_bytes: 32 << 20,
        time_limit: std::time::Duration::from_secs(20),
        ..Limits::default()
    };
    let source = format!("function when()\n{body}\nreturn true end");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut e = engine_with(limits, "hostile", &source);
        let _ = done_tx.send(tick(&mut e, 1.0).error);
    });
    let outcome = done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the tick never ended: {body}"));
    outcome.unwrap_or_else(|| panic!("the attack must fail the tick: {body}"))
}

fn stopped(err: &policy::PolicyError) -> bool {
    matches!(
        err.kind,
        ErrorKind::InstructionBudget | ErrorKind::TimeLimit
    )
}

#[test]
fn a_gc_finalizer_cannot_be_installed() {
    for body in [
        "setmetatable({}, {__gc = function() while true do end end}) collectgarbage()",
        // A placeholder then filled in: the object would still be marked for finalization.
        "local mt = {__gc = true} setmetatable({}, mt) mt.__gc = function() while true do end end",
        "local t = setmetatable({}, {__gc = false})",
    ] {
        let err = bounded_attack(body);
        assert!(
            err.message.contains("__gc finalizers are not allowed"),
            "{err}"
        );
    }
    // Without __gc at setmetatable time, a field added later is never called (Lua semantics).
    let mut e = engine(
        "late",
        "function when() local mt = {} setmetatable({}, mt) mt.__gc = function() while true do end end collectgarbage() return true end",
    );
    assert!(tick(&mut e, 1.0).error.is_none());
}

#[test]
fn an_xpcall_message_handler_cannot_outlive_the_budget() {
    for body in [
        "xpcall(function() while true do end end, function() while true do end end)",
        "while true do xpcall(function() while true do end end, function(m) return m end) end",
        "xpcall(function() while true do end end, function() local s = string.rep('a', 3000) s:find('.-.-.-.-b') end)",
    ] {
        let err = bounded_attack(body);
        assert!(stopped(&err), "{body}: {err}");
    }
    // An ordinary error still reaches the policy's handler.
    let mut e = engine(
        "handler",
        "function when() local ok, m = xpcall(error, function(m) return 'handled: ' .. m end, 'x') assert(not ok and m == 'handled: x') return true end",
    );
    assert!(tick(&mut e, 1.0).error.is_none());
}

#[test]
fn backtracking_patterns_run_under_the_budget() {
    let subject = "local s = string.rep('a', 20000)";
    for call in [
        "string.find(s, '.-.-.-.-.-.-b')",
        "s:match('(.*)(.*)(.*)(.*)b')",
        "for m in s:gmatch('a*a*a*a*b') do end",
        "s:gsub('(a-)(a-)(a-)b', '%1')",
        "string.find(s, '%f[a]a-a-a-a-$b')",
    ] {
        let err = bounded_attack(&format!("{subject}\n{call}"));
        assert!(stopped(&err), "{call}: {err}");
    }
}

#[test]
fn c_library_loops_are_charged() {
    for body in [
        // Lua's string.rep copies the empty string n times.
        "while true do string.rep('', math.maxinteger) end",
        "table.move({}, 1, math.maxinteger - 1, 1)",
        "table.concat({}, '', 1, math.maxinteger)",
        "while true do collectgarbage() end",
        "local s = string.rep('x', 1 << 20) while true do local n = utf8.len(s) end",
        "local s = string.rep('x', 1 << 20) while true do local u = s:upper() end",
        "local s = string.rep('x', 1 << 20) while true do local n = tonumber(s) end",
        "local t = setmetatable({}, {__len = function() return math.maxinteger end}) table.insert(t, 1, 1)",
    ] {
        let err = bounded_attack(body);
        assert!(
            stopped(&err) || err.message.contains("metatable are not supported"),
            "{body}: {err}"
        );
    }
    // No C function can be planted as a string metamethod.
    let err = bounded_attack("getmetatable('').__index = string.sub");
    assert!(err.message.contains("attempt to index a boolean"), "{err}");
}

#[test]
fn sorting_long_strings_is_charged_per_comparison() {
    for body in [
        // 20,000 references to one 1 MiB string: every comparison a 1 MiB strcmp in C.
        "local s = string.rep('x', 1 << 20) local t = {} for i = 1, 20000 do t[i] = s end table.sort(t)",
        "local s = string.rep('x', 1 << 20) local t = {} for i = 1, 20000 do t[i] = s end table.sort(t, function(a, b) return a > b end)",
        // A C comparator would run no Lua instruction at all.
        "local s = string.rep('x', 1 << 20) local t = {} for i = 1, 20000 do t[i] = s end table.sort(t, rawequal)",
    ] {
        let err = bounded_attack(body);
        assert!(stopped(&err), "{body}: {err}");
    }
}

#[test]
fn a_quadratic_compile_is_refused_before_it_starts() {
    for chain in [" or a", " and a"] {
        let body = format!(
            "local f, e = load('return a' .. string.rep('{chain}', 150000)) assert(f == nil) error(e)"
        );
        let err = bounded_attack(&body);
        assert!(err.message.contains("at most 10000 are accepted"), "{err}");
    }
    let source = format!(
        "function when()\nif x then{}\nend return true end",
        " elseif x then".repeat(60_000)
    );
    let mut engine = policy::PolicyEngine::new(Limits::default());
    let err = engine.load("chain", &source).unwrap_err().to_string();
    assert!(
        err.starts_with("chain.lua: the source holds 60000"),
        "{err}"
    );
}

#[test]
fn wrapped_functions_keep_their_results() {
    let mut e = engine(
        "same",
        r##"function when()
  assert(string.rep("", 1 << 40) == "" and string.rep("ab", 3, ",") == "ab,ab,ab")
  assert(("x"):rep(0) == "" and string.rep(5, 2) == "55")
  assert(table.concat({1, 2, 3}, "-") == "1-2-3" and table.concat({}, "x") == "")
  local t = {1, 2, 3} table.insert(t, 4) table.insert(t, 1, 0)
  assert(table.concat(t, "") == "01234" and table.remove(t) == 4 and table.remove(t, 1) == 0)
  table.sort(t, function(a, b) return a > b end) assert(t[1] == 3)
  local long = {("b"):rep(100), ("c"):rep(100), ("a"):rep(100)}
  table.sort(long) assert(long[1]:sub(1, 1) == "a" and long[3]:sub(1, 1) == "c")
  table.sort(long, function(a, b) return a > b end) assert(long[1]:sub(1, 1) == "c")
  assert(not pcall(table.sort, long, 5))
  assert(select("#", table.unpack({1, 2, 3})) == 3)
  assert(table.move({1, 2, 3}, 1, 3, 2)[3] == 2)
  assert(("héllo"):upper() == "HéLLO" and utf8.len("héllo") == 5)
  local n = 0 for _, c in utf8.codes("hé") do n = n + 1 end assert(n == 2)
  assert(tonumber("0x10") == 16 and tonumber("z", 36) == 35 and tonumber({}) == nil)
  assert(("%d-%s"):format(3, "x") == "3-x" and ("abc"):byte(1, -1) == 97)
  assert(string.find("a.b", ".", 1, true) == 2 and ("key=val"):match("(%w+)=(%w+)") == "key")
  assert(select(2, ("hello world"):gsub("o", "0")) == 2)
  assert(getmetatable("") == false and ("abc"):len() == 3)
  assert(load("return 1 + 1")() == 2)
  return true
end"##,
    );
    let out = tick(&mut e, 1.0);
    assert!(out.error.is_none(), "{:?}", out.error);
}

#[test]
fn a_wall_clock_limit_stops_what_the_budget_would_allow() {
    let limits = Limits {
        instructions: u64::MAX / 2,
        time_limit: std::time::Duration::from_millis(200),
        ..Limits::default()
    };
    let mut e = engine_with(limits, "slow", "function when()\n  while true do end\nend");
    let err = tick(&mut e, 1.0).error.unwrap();
    assert_eq!(err.kind, ErrorKind::TimeLimit, "{err}");
    assert!(
        err.message.contains("time limit of 200 ms exceeded"),
        "{err}"
    );
    assert_eq!(err.line, Some(2));
}

#[test]
fn the_host_can_interrupt_a_running_callback() {
    let limits = Limits {
        instructions: u64::MAX / 2,
        time_limit: std::time::Duration::from_secs(3600),
        ..Limits::default()
    };
    let mut e = engine_with(limits, "spin", "function when() while true do end end");
    let interrupt = e.interrupt_handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        interrupt.interrupt();
    });
    let err = tick(&mut e, 1.0).error.unwrap();
    stopper.join().unwrap();
    assert_eq!(err.kind, ErrorKind::Interrupted, "{err}");
    assert_eq!(e.stats().fallbacks, 0);
    e.interrupt_handle().clear();
}

// ---- Host memory a policy can claim is bounded and counted. ----

#[test]
fn huge_log_lines_are_cut_before_they_reach_the_host() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let src = "local big = string.rep('x', 16 << 20)\nfunction when()\n  for i = 1, 400 do log(1, big, i) print(big) end\n  return true\nend";
    let mut e = engine_with(limits, "chatty", src);
    e.drain_logs();
    for _ in 0..3 {
        let out = tick(&mut e, 1.0);
        assert!(out.error.is_none(), "{:?}", out.error);
        let (records, dropped) = e.drain_logs();
        assert_eq!(records.len(), Limits::MAX_LOG_LINES_PER_TICK);
        assert_eq!(dropped, 800 - Limits::MAX_LOG_LINES_PER_TICK as u64);
        for r in &records {
            assert!(r.message.len() <= Limits::MAX_LOG_LINE_BYTES + 3);
            assert!(r.message.ends_with("..."));
        }
    }
}

#[test]
fn a_huge_state_or_error_is_refused_or_cut() {
    let err = attack("WRstate(string.rep('x', 1 << 20))");
    assert!(
        err.message.contains("WRstate: the state is larger than"),
        "{err}"
    );
    let err = attack("local t = {} for i = 1, 100000 do t[i] = i end WRstate(t)");
    assert!(
        err.message.contains("WRstate: the state is larger than"),
        "{err}"
    );
    let err = attack("error(string.rep('e', 8 << 20))");
    assert!(
        err.message.len() <= Limits::MAX_ERROR_BYTES + 3,
        "{}",
        err.message.len()
    );
    let err = attack("local f = load(string.rep(' ', 2 << 20))");
    assert!(err.message.contains("load: chunks of at most"), "{err}");
}

#[test]
fn params_are_bounded() {
    let long = "v".repeat(Limits::MAX_PARAM_VALUE_BYTES + 1);
    let msg = policy::parse_param(&format!("k={long}")).unwrap_err();
    assert!(msg.contains("at most 4096 accepted"), "{msg}");
    let msg = policy::parse_param(&format!("{}=1", "k".repeat(65))).unwrap_err();
    assert!(msg.contains("at most 64 accepted"), "{msg}");
    assert!(policy::parse_param(&format!("k={}", "v".repeat(4096))).is_ok());
}

#[test]
fn a_loop_of_native_series_scans_meets_the_budget() {
    let limits = Limits {
        instructions: 5_000_000,
        ..Limits::default()
    };
    let mut e = engine_with(
        limits,
        "scan",
        "function when()\n  while true do timeseries():fans() end\nend",
    );
    let series = policy::VecSeries::new((0..100_000).map(|i| (i as f64, i % 50)).collect());
    let out = tick_on(&mut e, &[metrics(1.0)], &policy::Params::new(), &series);
    let err = out.error.expect("the loop is stopped");
    assert!(stopped(&err), "{err}");
}

/// The worst chains the compile bound allows, timed (docs/policy-language.md quotes the
/// figures): `cargo test --release -p mantle-policy --test sandbox -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints compile times"]
fn compile_time_at_the_chain_bound() {
    let n = policy::MAX_CHAIN_TOKENS;
    for (what, source) in [
        (
            "or",
            format!(
                "x = a{}\nfunction when() return true end",
                " or a".repeat(n)
            ),
        ),
        (
            "and",
            format!(
                "x = a{}\nfunction when() return true end",
                " and a".repeat(n)
            ),
        ),
        (
            "elseif",
            format!(
                "function when()\nif x then{}\nend return true end",
                " elseif x then".repeat(n)
            ),
        ),
    ] {
        let mut engine = policy::PolicyEngine::new(Limits::default());
        let started = std::time::Instant::now();
        engine.load("chain", &source).unwrap();
        println!(
            "{n} `{what}`: {} bytes, loaded in {:.1} ms",
            source.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
