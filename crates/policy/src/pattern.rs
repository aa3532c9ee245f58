//! Lua 5.4 patterns (`string.find`, `match`, `gmatch`, `gsub`) matched in Rust under the
//! policy's instruction budget.
//!
//! Lua's own matcher runs in C, where the count hook never fires, and backtracks: a pattern
//! such as `(.-)(.-)(.-)x` over a long subject takes time exponential in its quantifiers, so one
//! call could hold the policy thread for hours. This is a port of `lstrlib.c`'s matcher (same
//! syntax, captures, errors and results) that charges every step to the budget, so a
//! backtracking pattern fails with the budget error like a loop in Lua would.

use mlua::{Function, Lua, MultiValue, Value};

use crate::budget::{Budget, Stop};

/// Nesting of the recursive matcher, as Lua's `MAXCCALLS` (pattern too complex beyond).
const MAX_DEPTH: usize = 200;
/// As `LUA_MAXCAPTURES`.
const MAX_CAPTURES: usize = 32;
/// Steps between two charges to the budget.
const CHARGE_EVERY: u64 = 1_024;
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// Why matching stopped early.
pub(crate) enum Fail {
    /// A malformed pattern or bad capture, with Lua's message.
    Pattern(String),
    /// The budget (or the time limit) ran out.
    Budget(Stop),
}

type Step<T> = Result<T, Fail>;

fn bad(message: impl Into<String>) -> Fail {
    Fail::Pattern(message.into())
}

struct Matcher<'a> {
    src: &'a [u8],
    pat: &'a [u8],
    depth: usize,
    level: usize,
    capture: [(usize, isize); MAX_CAPTURES],
    steps: u64,
    budget: &'a Budget,
}

impl<'a> Matcher<'a> {
    fn new(src: &'a [u8], pat: &'a [u8], budget: &'a Budget) -> Matcher<'a> {
        Matcher {
            src,
            pat,
            depth: MAX_DEPTH,
            level: 0,
            capture: [(0, 0); MAX_CAPTURES],
            steps: 0,
            budget,
        }
    }

    fn reset(&mut self) {
        self.level = 0;
        self.depth = MAX_DEPTH;
    }

    fn step(&mut self, n: u64) -> Step<()> {
        self.steps += n;
        if self.steps >= CHARGE_EVERY {
            let steps = std::mem::take(&mut self.steps);
            self.budget.charge(steps).map_err(Fail::Budget)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Step<()> {
        let steps = std::mem::take(&mut self.steps);
        self.budget.charge(steps).map_err(Fail::Budget)
    }

    fn class_end(&self, mut p: usize) -> Step<usize> {
        let c = self.pat[p];
        p += 1;
        if c == b'%' {
            if p >= self.pat.len() {
                return Err(bad("malformed pattern (ends with '%')"));
            }
            return Ok(p + 1);
        }
        if c == b'[' {
            if self.pat.get(p) == Some(&b'^') {
                p += 1;
            }
            loop {
                if p >= self.pat.len() {
                    return Err(bad("malformed pattern (missing ']')"));
                }
                let c = self.pat[p];
                p += 1;
                if c == b'%' && p < self.pat.len() {
                    p += 1;
                }
                if self.pat.get(p) == Some(&b']') {
                    return Ok(p + 1);
                }
            }
        }
        Ok(p)
    }

    fn bracket_class(&self, c: u8, mut p: usize, end: usize) -> bool {
        let mut sig = true;
        if self.pat.get(p + 1) == Some(&b'^') {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= end {
                break;
            }
            if self.pat[p] == b'%' {
                p += 1;
                if match_class(c, self.pat.get(p).copied().unwrap_or(0)) {
                    return sig;
                }
            } else if self.pat.get(p + 1) == Some(&b'-') && p + 2 < end {
                p += 2;
                if self.pat[p - 2] <= c && c <= self.pat[p] {
                    return sig;
                }
            } else if self.pat[p] == c {
                return sig;
            }
        }
        !sig
    }

    fn single(&self, s: usize, p: usize, ep: usize) -> bool {
        let Some(&c) = self.src.get(s) else {
            return false;
        };
        match self.pat[p] {
            b'.' => true,
            b'%' => match_class(c, self.pat.get(p + 1).copied().unwrap_or(0)),
            b'[' => self.bracket_class(c, p, ep - 1),
            other => other == c,
        }
    }

    fn do_match(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if self.depth == 0 {
            return Err(bad("pattern too complex"));
        }
        self.depth -= 1;
        let result = self.match_body(s, p);
        self.depth += 1;
        result
    }

    fn match_body(&mut self, mut s: usize, mut p: usize) -> Step<Option<usize>> {
        loop {
            self.step(1)?;
            if p == self.pat.len() {
                return Ok(Some(s));
            }
            match self.pat[p] {
                b'(' => {
                    return if self.pat.get(p + 1) == Some(&b')') {
                        self.start_capture(s, p + 2, CAP_POSITION)
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == self.pat.len() => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                b'%' if self.pat.get(p + 1) == Some(&b'b') => {
                    match self.match_balance(s, p + 2)? {
                        Some(e) => {
                            s = e;
                            p += 4;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                b'%' if self.pat.get(p + 1) == Some(&b'f') => {
                    p += 2;
                    if self.pat.get(p) != Some(&b'[') {
                        return Err(bad("missing '[' after '%f' in pattern"));
                    }
                    let ep = self.class_end(p)?;
                    let prev = if s == 0 { 0 } else { self.src[s - 1] };
                    let cur = self.src.get(s).copied().unwrap_or(0);
                    if !self.bracket_class(prev, p, ep - 1) && self.bracket_class(cur, p, ep - 1) {
                        p = ep;
                        continue;
                    }
                    return Ok(None);
                }
                b'%' if self.pat.get(p + 1).is_some_and(u8::is_ascii_digit) => {
                    match self.match_capture(s, self.pat[p + 1])? {
                        Some(e) => {
                            s = e;
                            p += 2;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                _ => {
                    let ep = self.class_end(p)?;
                    let m = self.single(s, p, ep);
                    match self.pat.get(ep) {
                        Some(b'?') => {
                            if m {
                                if let Some(e) = self.do_match(s + 1, ep + 1)? {
                                    return Ok(Some(e));
                                }
                            }
                            p = ep + 1;
                        }
                        Some(b'+') => {
                            return if m {
                                self.max_expand(s + 1, p, ep)
                            } else {
                                Ok(None)
                            };
                        }
                        Some(b'*') => return self.max_expand(s, p, ep),
                        Some(b'-') => return self.min_expand(s, p, ep),
                        _ => {
                            if !m {
                                return Ok(None);
                            }
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        }
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        let mut i = 0;
        while self.single(s + i, p, ep) {
            self.step(1)?;
            i += 1;
        }
        loop {
            if let Some(e) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(e));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        loop {
            if let Some(e) = self.do_match(s, ep + 1)? {
                return Ok(Some(e));
            }
            if self.single(s, p, ep) {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Step<Option<usize>> {
        if self.level >= MAX_CAPTURES {
            return Err(bad("too many captures"));
        }
        self.capture[self.level] = (s, what);
        self.level += 1;
        let result = self.do_match(s, p)?;
        if result.is_none() {
            self.level -= 1;
        }
        Ok(result)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        let Some(l) = (0..self.level)
            .rev()
            .find(|&l| self.capture[l].1 == CAP_UNFINISHED)
        else {
            return Err(bad("invalid pattern capture"));
        };
        self.capture[l].1 = (s - self.capture[l].0) as isize;
        let result = self.do_match(s, p)?;
        if result.is_none() {
            self.capture[l].1 = CAP_UNFINISHED;
        }
        Ok(result)
    }

    fn match_balance(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return Err(bad("malformed pattern (missing arguments to '%b')"));
        }
        if self.src.get(s) != Some(&self.pat[p]) {
            return Ok(None);
        }
        let (open, close) = (self.pat[p], self.pat[p + 1]);
        let mut depth = 1;
        let mut i = s + 1;
        while i < self.src.len() {
            self.step(1)?;
            let c = self.src[i];
            if c == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            } else if c == open {
                depth += 1;
            }
            i += 1;
        }
        Ok(None)
    }

    fn match_capture(&mut self, s: usize, digit: u8) -> Step<Option<usize>> {
        let l = usize::from(digit.wrapping_sub(b'1'));
        if digit < b'1' || l >= self.level || self.capture[l].1 == CAP_UNFINISHED {
            return Err(bad(format!(
                "invalid capture index %{}",
                i32::from(digit) - i32::from(b'0')
            )));
        }
        let (init, len) = self.capture[l];
        let len = len.max(0) as usize;
        self.step(len as u64)?;
        if self.src.len() - s >= len && self.src[init..init + len] == self.src[s..s + len] {
            Ok(Some(s + len))
        } else {
            Ok(None)
        }
    }

    /// Capture `i` of a match over `s..e` (the whole match when there are no captures).
    fn capture_value(&self, lua: &Lua, i: usize, s: usize, e: usize) -> mlua::Result<Value> {
        if i >= self.level {
            if i != 0 {
                return Err(soft(format!("invalid capture index %{}", i + 1)));
            }
            return Ok(Value::String(lua.create_string(&self.src[s..e])?));
        }
        let (init, len) = self.capture[i];
        match len {
            CAP_UNFINISHED => Err(soft("unfinished capture")),
            CAP_POSITION => Ok(Value::Integer(init as i64 + 1)),
            len => Ok(Value::String(
                lua.create_string(&self.src[init..init + len as usize])?,
            )),
        }
    }

    fn captures(&self, lua: &Lua, s: usize, e: usize, whole: bool) -> mlua::Result<MultiValue> {
        let n = if self.level == 0 && whole {
            1
        } else {
            self.level
        };
        (0..n).map(|i| self.capture_value(lua, i, s, e)).collect()
    }
}

fn match_class(c: u8, class: u8) -> bool {
    let found = match class.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t'..=b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0, // deprecated in Lua 5.4, still accepted
        _ => return class == c,
    };
    if class.is_ascii_uppercase() {
        !found
    } else {
        found
    }
}

/// `posrelatI` of lstrlib: a 1-based start position, negative from the end.
fn start_position(pos: i64, len: usize) -> usize {
    if pos > 0 {
        pos as usize
    } else if pos == 0 || pos.unsigned_abs() as usize > len {
        1
    } else {
        (len as i64 + pos + 1) as usize
    }
}

/// An error Lua's string library would raise with `luaL_error`: returned to the Lua wrapper
/// (see [`install`]), which raises it as a string naming the caller's line, as Lua does.
#[derive(Debug)]
struct Soft(String);

impl std::fmt::Display for Soft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Soft {}

fn soft(message: impl Into<String>) -> mlua::Error {
    mlua::Error::external(Soft(message.into()))
}

fn fail_to_lua(fail: Fail) -> mlua::Error {
    match fail {
        Fail::Pattern(m) => soft(m),
        Fail::Budget(stop) => stop.error(),
    }
}

/// Subject or pattern: a string, or a number as Lua converts it.
fn text(lua: &Lua, value: &Value, arg: usize, fname: &str) -> mlua::Result<mlua::String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Integer(_) | Value::Number(_) => lua
            .coerce_string(value.clone())?
            .ok_or_else(|| soft("number conversion failed")),
        other => Err(soft(format!(
            "bad argument #{arg} to '{fname}' (string expected, got {})",
            lua_type_name(other)
        ))),
    }
}

fn lua_type_name(value: &Value) -> &'static str {
    match value {
        Value::Nil => "no value",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::Boolean(_) => "boolean",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        _ => value.type_name(),
    }
}

fn opt_integer(value: Option<&Value>, default: i64, arg: usize, fname: &str) -> mlua::Result<i64> {
    match value {
        None | Some(Value::Nil) => Ok(default),
        Some(Value::Integer(i)) => Ok(*i),
        Some(Value::Number(n)) if n.fract() == 0.0 && n.abs() < 9.2e18 => Ok(*n as i64),
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .ok_or_else(|| {
                soft(format!(
                    "bad argument #{arg} to '{fname}' (number expected, got string)"
                ))
            }),
        Some(other) => Err(soft(format!(
            "bad argument #{arg} to '{fname}' (number has no integer representation, got {})",
            lua_type_name(other)
        ))),
    }
}

fn has_specials(pat: &[u8]) -> bool {
    pat.iter().any(|c| SPECIALS.contains(c))
}

/// `string.find` (`find = true`) and `string.match`.
fn find_or_match(
    lua: &Lua,
    budget: &Budget,
    args: MultiValue,
    find: bool,
) -> mlua::Result<MultiValue> {
    let fname = if find { "find" } else { "match" };
    let args: Vec<Value> = args.into_iter().collect();
    let s = text(lua, args.first().unwrap_or(&Value::Nil), 1, fname)?;
    let p = text(lua, args.get(1).unwrap_or(&Value::Nil), 2, fname)?;
    let (src, pat) = (s.as_bytes(), p.as_bytes());
    let init = start_position(opt_integer(args.get(2), 1, 3, fname)?, src.len());
    if init > src.len() + 1 {
        return Ok(MultiValue::from_iter([Value::Nil]));
    }
    let plain = args
        .get(3)
        .is_some_and(|v| !matches!(v, Value::Nil | Value::Boolean(false)));
    if find && (plain || !has_specials(&pat)) {
        let found = if pat.is_empty() {
            Some(0)
        } else {
            src[init - 1..]
                .windows(pat.len())
                .position(|w| w == &pat[..])
        };
        // Charged as the positions tried, each a comparison of up to the pattern's length.
        let tried = found.unwrap_or(src.len() - (init - 1)) as u64 + 1;
        budget
            .charge(tried * (pat.len() as u64 / 8 + 1))
            .map_err(Stop::error)?;
        return Ok(match found {
            Some(at) => MultiValue::from_iter([
                Value::Integer((init + at) as i64),
                Value::Integer((init + at + pat.len() - 1) as i64),
            ]),
            None => MultiValue::from_iter([Value::Nil]),
        });
    }
    let (anchor, body) = match pat.first() {
        Some(b'^') => (true, &pat[1..]),
        _ => (false, &pat[..]),
    };
    let mut m = Matcher::new(&src, body, budget);
    let mut s1 = init - 1;
    loop {
        m.reset();
        if let Some(e) = m.do_match(s1, 0).map_err(fail_to_lua)? {
            m.flush().map_err(fail_to_lua)?;
            if find {
                let mut out = MultiValue::from_iter([
                    Value::Integer(s1 as i64 + 1),
                    Value::Integer(e as i64),
                ]);
                out.extend(m.captures(lua, s1, e, false)?);
                return Ok(out);
            }
            return m.captures(lua, s1, e, true);
        }
        s1 += 1;
        if anchor || s1 > src.len() {
            break;
        }
    }
    m.flush().map_err(fail_to_lua)?;
    Ok(MultiValue::from_iter([Value::Nil]))
}

/// `string.gsub`. The result is built in Rust memory, so it is held to the policy's memory
/// limit as it grows.
fn gsub(lua: &Lua, budget: &Budget, memory: usize, args: MultiValue) -> mlua::Result<MultiValue> {
    let args: Vec<Value> = args.into_iter().collect();
    let s = text(lua, args.first().unwrap_or(&Value::Nil), 1, "gsub")?;
    let p = text(lua, args.get(1).unwrap_or(&Value::Nil), 2, "gsub")?;
    let repl = args.get(2).cloned().unwrap_or(Value::Nil);
    let repl_text = match &repl {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => {
            Some(text(lua, &repl, 3, "gsub")?)
        }
        Value::Table(_) | Value::Function(_) => None,
        other => {
            return Err(soft(format!(
                "bad argument #3 to 'gsub' (string/function/table expected, got {})",
                lua_type_name(other)
            )))
        }
    };
    let (src, pat) = (s.as_bytes(), p.as_bytes());
    let max_n = opt_integer(args.get(3), src.len() as i64 + 1, 4, "gsub")?;
    let (anchor, body) = match pat.first() {
        Some(b'^') => (true, &pat[1..]),
        _ => (false, &pat[..]),
    };
    let mut m = Matcher::new(&src, body, budget);
    let mut out: Vec<u8> = Vec::new();
    let (mut at, mut n, mut last) = (0usize, 0i64, None::<usize>);
    while n < max_n {
        m.reset();
        let found = m.do_match(at, 0).map_err(fail_to_lua)?;
        match found {
            Some(e) if Some(e) != last => {
                n += 1;
                m.flush().map_err(fail_to_lua)?;
                add_value(lua, &m, &mut out, at, e, &repl, repl_text.as_ref())?;
                at = e;
                last = Some(e);
            }
            _ if at < src.len() => {
                out.push(src[at]);
                at += 1;
            }
            _ => break,
        }
        if out.len() > memory {
            return Err(mlua::Error::MemoryError(
                "gsub: result larger than the policy's memory limit".into(),
            ));
        }
        m.step(1).map_err(fail_to_lua)?;
        if anchor {
            break;
        }
    }
    out.extend_from_slice(&src[at..]);
    m.flush().map_err(fail_to_lua)?;
    budget.charge(out.len() as u64 / 16).map_err(Stop::error)?;
    Ok(MultiValue::from_iter([
        Value::String(lua.create_string(&out)?),
        Value::Integer(n),
    ]))
}

fn add_value(
    lua: &Lua,
    m: &Matcher,
    out: &mut Vec<u8>,
    s: usize,
    e: usize,
    repl: &Value,
    repl_text: Option<&mlua::String>,
) -> mlua::Result<()> {
    let value = match repl {
        Value::Table(t) => t.get::<Value>(m.capture_value(lua, 0, s, e)?)?,
        Value::Function(f) => first(call(f, m.captures(lua, s, e, true)?)?),
        _ => {
            let r = repl_text.map(|r| r.as_bytes().to_vec()).unwrap_or_default();
            let mut i = 0;
            while i < r.len() {
                let c = r[i];
                i += 1;
                if c != b'%' {
                    out.push(c);
                    continue;
                }
                match r.get(i) {
                    Some(b'%') => out.push(b'%'),
                    Some(d) if d.is_ascii_digit() => {
                        let v = if *d == b'0' {
                            Value::String(lua.create_string(&m.src[s..e])?)
                        } else {
                            m.capture_value(lua, usize::from(d - b'1'), s, e)?
                        };
                        append(lua, out, &v)?;
                    }
                    _ => return Err(soft("invalid use of '%' in replacement string")),
                }
                i += 1;
            }
            return Ok(());
        }
    };
    match value {
        Value::Nil | Value::Boolean(false) => out.extend_from_slice(&m.src[s..e]),
        Value::String(_) | Value::Integer(_) | Value::Number(_) => append(lua, out, &value)?,
        other => {
            return Err(soft(format!(
                "invalid replacement value (a {})",
                lua_type_name(&other)
            )))
        }
    }
    Ok(())
}

fn call(f: &Function, args: MultiValue) -> mlua::Result<MultiValue> {
    f.call::<MultiValue>(args)
}

fn first(values: MultiValue) -> Value {
    values.into_iter().next().unwrap_or(Value::Nil)
}

fn append(lua: &Lua, out: &mut Vec<u8>, v: &Value) -> mlua::Result<()> {
    match v {
        Value::String(s) => out.extend_from_slice(&s.as_bytes()),
        Value::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        other => {
            if let Some(s) = lua.coerce_string(other.clone())? {
                out.extend_from_slice(&s.as_bytes());
            }
        }
    }
    Ok(())
}

/// `string.gmatch(s, pattern [, init])`: the iterator keeps its position in Rust.
fn gmatch(
    lua: &Lua,
    budget: std::sync::Arc<Budget>,
    fail: mlua::Table,
    args: MultiValue,
) -> mlua::Result<Function> {
    let args: Vec<Value> = args.into_iter().collect();
    let s = text(lua, args.first().unwrap_or(&Value::Nil), 1, "gmatch")?;
    let p = text(lua, args.get(1).unwrap_or(&Value::Nil), 2, "gmatch")?;
    let len = s.as_bytes().len();
    let init = start_position(opt_integer(args.get(2), 1, 3, "gmatch")?, len).min(len + 1);
    let state = std::cell::Cell::new((init - 1, None::<usize>));
    lua.create_function(move |lua, ()| {
        soft_to_results(lua, &fail, gmatch_step(lua, &s, &p, &budget, &state))
    })
}

fn gmatch_step(
    lua: &Lua,
    s: &mlua::String,
    p: &mlua::String,
    budget: &Budget,
    state: &std::cell::Cell<(usize, Option<usize>)>,
) -> mlua::Result<MultiValue> {
    {
        let (src, pat) = (s.as_bytes(), p.as_bytes());
        let mut m = Matcher::new(&src, &pat, budget);
        let (mut at, last) = state.get();
        while at <= src.len() {
            m.reset();
            if let Some(e) = m.do_match(at, 0).map_err(fail_to_lua)? {
                if Some(e) != last {
                    state.set((e, Some(e)));
                    m.flush().map_err(fail_to_lua)?;
                    return m.captures(lua, at, e, true);
                }
            }
            at += 1;
        }
        state.set((at, last));
        m.flush().map_err(fail_to_lua)?;
        Ok(MultiValue::from_iter([Value::Nil]))
    }
}

/// Turns a [`Soft`] error into `(sentinel, message)` results for the Lua wrapper.
fn soft_to_results(
    lua: &Lua,
    fail: &mlua::Table,
    result: mlua::Result<MultiValue>,
) -> mlua::Result<MultiValue> {
    match result {
        Err(mlua::Error::ExternalError(e)) if e.downcast_ref::<Soft>().is_some() => {
            Ok(MultiValue::from_iter([
                Value::Table(fail.clone()),
                Value::String(lua.create_string(e.to_string())?),
            ]))
        }
        other => other,
    }
}

/// Lua side: raises a soft error as a string at the caller's line (as `luaL_error` does);
/// gmatch's iterator is wrapped the same way.
const WRAPPERS: &str = r#"
local S, FAIL, find, match, gsub, gmatch = ...
local error = error
local function pass(first, ...)
  if first == FAIL then error((...), 2) end
  return first, ...
end
S.find = function(...) return pass(find(...)) end
S.match = function(...) return pass(match(...)) end
S.gsub = function(...) return pass(gsub(...)) end
S.gmatch = function(...)
  local step = pass(gmatch(...))
  return function() return pass(step()) end
end
"#;

/// Replaces `find`, `match`, `gmatch` and `gsub` in the `string` table.
pub(crate) fn install(
    lua: &Lua,
    string: &mlua::Table,
    budget: &std::sync::Arc<Budget>,
    memory: usize,
) -> mlua::Result<()> {
    let fail = lua.create_table()?;
    let (b, f) = (budget.clone(), fail.clone());
    let find = lua.create_function(move |lua, args| {
        soft_to_results(lua, &f, find_or_match(lua, &b, args, true))
    })?;
    let (b, f) = (budget.clone(), fail.clone());
    let match_ = lua.create_function(move |lua, args| {
        soft_to_results(lua, &f, find_or_match(lua, &b, args, false))
    })?;
    let (b, f) = (budget.clone(), fail.clone());
    let gsub = lua
        .create_function(move |lua, args| soft_to_results(lua, &f, gsub(lua, &b, memory, args)))?;
    let (b, f) = (budget.clone(), fail.clone());
    let gmatch = lua.create_function(move |lua, args| {
        let iterator = gmatch(lua, b.clone(), f.clone(), args)
            .map(|it| MultiValue::from_iter([Value::Function(it)]));
        soft_to_results(lua, &f, iterator)
    })?;
    lua.load(WRAPPERS).set_name("=sandbox").call::<()>((
        string.clone(),
        fail,
        find,
        match_,
        gsub,
        gmatch,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::budget::Interrupt;
    use crate::limits::Limits;
    use crate::sandbox::new_state;

    /// Runs `expr` in the sandbox (Rust patterns) and in a plain Lua state (Lua's C
    /// matcher); both must give the same results or the same error.
    fn same(expr: &str) {
        let (sandbox, budget) = new_state(&Limits::default(), Interrupt::default()).unwrap();
        budget.refill();
        let plain = mlua::Lua::new();
        let code = format!("local r = table.pack(pcall(function() local v = table.pack({expr}) return table.unpack(v, 1, v.n) end)) for i = 1, r.n do r[i] = tostring(r[i]) end return table.concat(r, '|', 1, r.n)");
        // Both name the caller's line, in the same format.
        let ours: String = sandbox.load(&code).set_name("=t").eval().unwrap();
        let theirs: String = plain.load(&code).set_name("=t").eval().unwrap();
        assert_eq!(ours, theirs, "{expr}");
        let _ = Arc::strong_count(&budget);
    }

    #[test]
    fn patterns_match_as_lua_does() {
        for expr in [
            r#"("hello world"):find("o w")"#,
            r#"("hello world"):find("l+")"#,
            r#"("hello world"):find("l", 1, true)"#,
            r#"("hello world"):find("", 20)"#,
            r#"("hello world"):find("", 12)"#,
            r#"("hello world"):find("o", -3)"#,
            r#"("hello"):find("(h)(e)")"#,
            r#"("hello"):find("()ll()")"#,
            r#"("key = value"):match("^(%w+)%s*=%s*(%w+)$")"#,
            r#"("  trim  "):match("^%s*(.-)%s*$")"#,
            r#"("THE (quick) fox"):find("%((%a+)%)")"#,
            r#"("f(a(b)c)d"):match("%b()")"#,
            r#"("THE (quick) fox"):match("%f[%a]%a+", 5)"#,
            r#"("abc"):match("[^%a]")"#,
            r#"("a-b_c"):match("[%w_%-]+")"#,
            r#"("x]y"):match("[]]")"#,
            r#"("2024-01-02"):match("(%d+)-(%d+)-(%d+)")"#,
            r#"("aaa"):match("a-b")"#,
            r#"("aaab"):match("a-b")"#,
            r#"("abab"):match("(ab)%1")"#,
            r#"("hello"):match(".-(l+)(.*)")"#,
            r#"("x"):match("[a-")"#,
            r#"("x"):match("%")"#,
            r#"("x"):match("(x")"#,
            r#"("x"):match("x)")"#,
            r#"("x"):match("%1")"#,
            r#"("x"):match("%bx")"#,
            r#"("x"):match("%f")"#,
            r#"("hello world"):gsub("o", "0")"#,
            r#"("hello world"):gsub("(%w+)", "<%1>")"#,
            r#"("hello world"):gsub("%w+", "%0 %0", 1)"#,
            r#"("hello"):gsub("", "-")"#,
            r#"("abc"):gsub("%w", {a = 1, b = true})"#,
            r#"("abc"):gsub("%w", function(c) if c == "b" then return nil end return c:upper() end)"#,
            r#"("abc"):gsub("%w", "%2")"#,
            r#"("abc"):gsub("%w", "%x")"#,
            r#"("abc"):gsub("^a", "z")"#,
            r#"("abc"):gsub("()", "%1")"#,
            r#"("abc"):gsub("b", {})"#,
            r#"("abc"):gsub("b", function() return {} end)"#,
            r#"string.gsub("abc", "b")"#,
            r#"(123):find(2)"#,
            r#"("a,b,,c"):gsub(",", ";", 2)"#,
            r#"(function() local t = {} for k, v in ("a=1, b=2"):gmatch("(%w+)=(%w+)") do t[#t+1] = k .. v end return table.concat(t, ";") end)()"#,
            r#"(function() local t = {} for w in ("one two  three"):gmatch("%a*") do t[#t+1] = "[" .. w .. "]" end return table.concat(t) end)()"#,
            r#"(function() local t = {} for w in ("abc"):gmatch(".", 2) do t[#t+1] = w end return table.concat(t) end)()"#,
            r#"(function() local t = {} for a, b in ("abc"):gmatch("()(.)") do t[#t+1] = a .. b end return table.concat(t) end)()"#,
            r#"("%a"):find("%%")"#,
            r#"("a.b"):find(".", 1)"#,
            r#"("[x]"):match("%[(.)%]")"#,
            r#"("\0a\0"):find("%z")"#,
            r#"("café"):match("[\128-\255]+")"#,
        ] {
            same(expr);
        }
    }
}
