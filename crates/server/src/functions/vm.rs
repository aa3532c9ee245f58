//! The functions thread: one sandboxed Lua state (the policy engine's sandbox, so the same
//! instruction budget, wall-clock cut-off and memory ceiling), every installed library and
//! cached script in it, and one function or script running at a time. It is a thread of its
//! own, not a tokio worker: a function that runs to its budget holds up other functions, never
//! the connections (a connection waits for its reply on a channel).

use super::catalog::{Catalog, FunctionInfo, LibraryInfo, Running, KNOWN_FLAGS};
use super::convert::{self, error_line};
use super::exec::{CallRequest, Called, Outcome};
use super::library::{self, LibraryHistory};
use super::registry::Snapshot;
use crate::frame::Frame;
use bytes::Bytes;
use policy::mlua::{self, ChunkMode, Function, Lua, MultiValue, Table, Value};
use policy::{Interrupt, Limits, Sandbox};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc as channel, oneshot};

/// Scripts cached for `EVALSHA`; when full the cache is emptied (clients such as redis-py
/// then send the script again with `EVAL`).
pub const MAX_SCRIPTS: usize = 1_000;

/// Work for the functions thread.
pub enum Job {
    /// Compiles a library without installing it: its functions, or the error to reply.
    Check {
        code: String,
        reply: oneshot::Sender<Result<Vec<FunctionInfo>, String>>,
    },
    /// Installs the active version of every library of a registry snapshot (unless an
    /// installed snapshot is newer).
    Install {
        snapshot: Snapshot,
        reply: oneshot::Sender<()>,
    },
    Call {
        target: Target,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        read_only: bool,
        /// Bytes the reply may take (`--client-output-limit`, at most the memory limit).
        reply_limit: u64,
        /// Where the function's `redis.call`s go (the caller's transaction).
        calls: channel::Sender<CallRequest>,
        reply: oneshot::Sender<Outcome>,
    },
    /// `SCRIPT LOAD`: compiles and caches; the SHA-1.
    LoadScript {
        code: Bytes,
        reply: oneshot::Sender<Result<String, String>>,
    },
    FlushScripts,
}

pub enum Target {
    Function(String),
    /// A script by SHA-1, with its code when the caller has it (`EVAL`).
    Script {
        sha: String,
        code: Option<Bytes>,
    },
}

/// State the thread shares with the connections.
pub struct Shared {
    pub catalog: Mutex<Catalog>,
    pub running: Mutex<Option<Running>>,
    pub interrupt: Interrupt,
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

struct Registered {
    callback: Function,
    info: FunctionInfo,
}

struct Loaded {
    version: u32,
    loaded_at_ms: u64,
    functions: Vec<Registered>,
}

/// The call in progress, as `redis.call` sees it.
struct Active {
    calls: channel::Sender<CallRequest>,
    read_only: bool,
    wrote: Arc<AtomicBool>,
}

type ActiveSlot = Arc<Mutex<Option<Active>>>;

struct Vm {
    sandbox: Sandbox,
    /// Calls a function under `pcall`: `(true, result)` or `(false, error)`, the error a
    /// table (`{err=...}`) or a string. The sandbox's `pcall` lets a budget stop through.
    trampoline: Function,
    runtime_redis: Table,
    /// The environment of every script: `KEYS` and `ARGV` are set in it before each run.
    script_env: Table,
    active: ActiveSlot,
    libraries: HashMap<String, Loaded>,
    /// Function name → library.
    functions: HashMap<String, String>,
    scripts: HashMap<String, (Function, bool)>,
    shared: Arc<Shared>,
    memory_limit: u64,
}

/// Starts the thread; it ends when the last sender of `jobs` is dropped.
pub fn spawn(limits: Limits, shared: Arc<Shared>) -> anyhow::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("mantle-functions".into())
        .spawn(move || {
            let vm = match Vm::new(&limits, shared) {
                Ok(vm) => {
                    let _ = ready_tx.send(Ok(()));
                    vm
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            vm.run(rx);
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(tx),
        Ok(Err(e)) => anyhow::bail!("starting the functions engine: {e}"),
        Err(_) => anyhow::bail!("the functions thread stopped while starting"),
    }
}

const TRAMPOLINE: &str = r#"
local pcall, type, tostring = pcall, type, tostring
return function(f, keys, args)
  local ok, r = pcall(f, keys, args)
  if ok then return true, r end
  if type(r) ~= "table" then r = tostring(r) end
  return false, r
end
"#;

/// The Lua half of `redis`: the Rust functions return `(ok, value)` and these raise, so an
/// error travels as Redis's `{err=...}` table through `pcall`, never as a host error object.
const REDIS_LIB: &str = r#"
local raw_call, raw_log, error, type = ...
local redis = {}
redis.call = function(...)
  local ok, r = raw_call(...)
  if not ok then error(r, 0) end
  return r
end
redis.pcall = function(...)
  local _, r = raw_call(...)
  return r
end
redis.error_reply = function(msg)
  if type(msg) ~= "string" then error("wrong number or type of arguments", 2) end
  return {err = msg}
end
redis.status_reply = function(msg)
  if type(msg) ~= "string" then error("wrong number or type of arguments", 2) end
  return {ok = msg}
end
redis.log = function(level, ...)
  local ok, e = raw_log(level, ...)
  if not ok then error(e, 2) end
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REDIS_VERSION = "7.2.0"
redis.REDIS_VERSION_NUM = 0x070200
return redis
"#;

/// A table whose reads fall through to the sandbox's globals and whose writes fail: a
/// library or script cannot leave state in globals between calls (as in Redis).
fn read_only_env(lua: &Lua) -> mlua::Result<Table> {
    let env = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.raw_set("__index", lua.globals())?;
    meta.raw_set(
        "__newindex",
        lua.create_function(|_, (_, key): (Value, Value)| -> mlua::Result<()> {
            Err(mlua::Error::runtime(format!(
                "Attempt to modify a readonly table: global '{}' (use local variables)",
                match key {
                    Value::String(s) => s.to_string_lossy(),
                    _ => "?".into(),
                }
            )))
        })?,
    )?;
    env.set_metatable(Some(meta))?;
    Ok(env)
}

fn log_level(level: i64) -> Option<&'static str> {
    Some(match level {
        0 => "debug",
        1 => "verbose",
        2 => "notice",
        3 => "warning",
        _ => return None,
    })
}

impl Vm {
    fn new(limits: &Limits, shared: Arc<Shared>) -> mlua::Result<Vm> {
        let sandbox = Sandbox::new(limits, shared.interrupt.clone())?;
        let lua = sandbox.lua();
        let active: ActiveSlot = Arc::default();
        let slot = Arc::clone(&active);
        let meter = sandbox.meter();
        let raw_call = lua.create_function(move |lua, args: MultiValue| {
            let args = match convert::to_args(args) {
                Ok(args) => args,
                Err(e) => return Ok((false, convert::error_table(lua, &e)?)),
            };
            meter.charge(1 + args.iter().map(|a| a.len() as u64).sum::<u64>() / 16)?;
            let guard = lock(&slot);
            let Some(active) = guard.as_ref() else {
                let e = "ERR redis.call is only available while a function runs";
                return Ok((false, convert::error_table(lua, e)?));
            };
            // To the caller's task, which runs it inside the function's transaction. This is
            // the functions thread, never a runtime worker: blocking holds up only functions.
            let (tx, rx) = oneshot::channel();
            let request = CallRequest {
                args,
                read_only: active.read_only,
                reply: tx,
            };
            let reply = match active.calls.blocking_send(request) {
                Ok(()) => match rx.blocking_recv() {
                    Ok(Called { reply, wrote }) => {
                        if wrote {
                            active.wrote.store(true, Ordering::Relaxed);
                        }
                        reply
                    }
                    Err(_) => Frame::err("the caller of this function has gone"),
                },
                Err(_) => Frame::err("the caller of this function has gone"),
            };
            drop(guard);
            meter.charge(reply.encoded_len(crate::frame::Protocol::Resp2) / 16)?;
            let ok = !matches!(reply, Frame::Error(_));
            Ok((ok, convert::to_lua(lua, reply)?))
        })?;
        let raw_log = lua.create_function(|_, args: MultiValue| {
            let mut args = args.into_iter();
            let level = match args.next() {
                Some(Value::Integer(n)) => log_level(n),
                Some(Value::Number(n)) => log_level(n as i64),
                _ => None,
            };
            let Some(level) = level else {
                return Ok((false, Some("Invalid log level".to_string())));
            };
            let mut line = String::new();
            for arg in args {
                let text = match arg {
                    Value::String(s) => s.to_string_lossy(),
                    Value::Integer(n) => n.to_string(),
                    Value::Number(n) => n.to_string(),
                    _ => continue,
                };
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(&text);
                if line.len() > Limits::MAX_LOG_LINE_BYTES {
                    line.truncate(Limits::MAX_LOG_LINE_BYTES);
                    line.push_str("...");
                    break;
                }
            }
            store::log_line!("mantle: function [{level}]: {line}");
            Ok((true, None))
        })?;
        let globals = lua.globals();
        let runtime_redis: Table = lua.load(REDIS_LIB).set_name("=redis").call((
            raw_call,
            raw_log,
            globals.raw_get::<Function>("error")?,
            globals.raw_get::<Function>("type")?,
        ))?;
        let trampoline: Function = lua.load(TRAMPOLINE).set_name("=trampoline").call(())?;
        let script_env = read_only_env(lua)?;
        script_env.raw_set("redis", runtime_redis.clone())?;
        let memory_limit = limits.memory_bytes as u64;
        Ok(Vm {
            sandbox,
            trampoline,
            runtime_redis,
            script_env,
            active,
            libraries: HashMap::new(),
            functions: HashMap::new(),
            scripts: HashMap::new(),
            shared,
            memory_limit,
        })
    }

    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            match job {
                Job::Check { code, reply } => {
                    let checked = self
                        .compile(&code)
                        .map(|(_, functions)| functions.into_iter().map(|f| f.info).collect());
                    let _ = reply.send(checked);
                }
                Job::Install { snapshot, reply } => {
                    self.install(snapshot);
                    let _ = reply.send(());
                }
                Job::Call {
                    target,
                    keys,
                    args,
                    read_only,
                    reply_limit,
                    calls,
                    reply,
                } => {
                    let outcome = self.call(target, keys, args, read_only, reply_limit, calls);
                    let _ = reply.send(outcome);
                }
                Job::LoadScript { code, reply } => {
                    let _ = reply.send(self.cache_script(&code));
                }
                Job::FlushScripts => {
                    self.scripts.clear();
                    lock(&self.shared.catalog).scripts.clear();
                }
            }
            // What a finished call left behind is garbage now: collect it so the next call
            // has the whole memory limit.
            let _ = self.sandbox.lua().gc_collect();
        }
    }

    /// Runs a library's code in an environment of its own, where `redis` offers only
    /// `register_function` and `log`; the functions it registered, or Redis's error.
    fn compile(&self, code: &str) -> Result<(String, Vec<Registered>), String> {
        let shebang = library::parse_shebang(code)?;
        let lua = self.sandbox.lua();
        let host = |e: mlua::Error| format!("ERR {e}");
        let body = library::body(code);
        policy::check_compile_cost("user_function", body.as_bytes())
            .map_err(|e| format!("ERR Error compiling function: {e}"))?;
        let env = read_only_env(lua).map_err(host)?;
        let registered: Arc<Mutex<Vec<Registered>>> = Arc::default();
        let sink = Arc::clone(&registered);
        let raw_register = lua
            .create_function(move |_, args: MultiValue| {
                Ok(match register(args) {
                    Ok(function) => {
                        let mut list = lock(&sink);
                        if list.iter().any(|r| r.info.name == function.info.name) {
                            Some("Function already exists in the library".to_string())
                        } else {
                            list.push(function);
                            None
                        }
                    }
                    Err(e) => Some(e),
                })
            })
            .map_err(host)?;
        let loading: Table = lua
            .load(
                r#"local raw_register, runtime, error = ...
                local redis = {}
                redis.register_function = function(...)
                  local e = raw_register(...)
                  if e then error(e, 2) end
                end
                redis.log = runtime.log
                for k, v in pairs(runtime) do
                  if type(v) ~= "function" then redis[k] = v end
                end
                return redis"#,
            )
            .set_name("=redis")
            .call((
                raw_register,
                self.runtime_redis.clone(),
                lua.globals().raw_get::<Function>("error").map_err(host)?,
            ))
            .map_err(host)?;
        env.raw_set("redis", loading).map_err(host)?;
        let chunk = lua
            .load(body.as_bytes())
            .set_name("@user_function")
            .set_mode(ChunkMode::Text)
            .set_environment(env.clone())
            .into_function()
            .map_err(|e| format!("ERR Error compiling function: {}", one_line(&e.to_string())))?;
        self.sandbox.refill();
        let ran: mlua::Result<(bool, Value)> =
            self.trampoline.call((chunk, Value::Nil, Value::Nil));
        match ran {
            Ok((true, _)) => {}
            Ok((false, error)) => {
                let message = match error {
                    Value::String(s) => s.to_string_lossy(),
                    Value::Table(t) => t.raw_get::<String>("err").unwrap_or_default(),
                    _ => String::new(),
                };
                return Err(format!(
                    "ERR Error registering functions: {}",
                    one_line(&message)
                ));
            }
            Err(e) => {
                return Err(format!(
                    "ERR Error registering functions: {}",
                    one_line(&e.to_string())
                ))
            }
        }
        // From now on the functions see the runtime `redis` (call, pcall, ...).
        env.raw_set("redis", self.runtime_redis.clone())
            .map_err(host)?;
        let functions = std::mem::take(&mut *lock(&registered));
        if functions.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok((shebang.name, functions))
    }

    /// Makes the installed libraries those of `snapshot`: unchanged versions stay, changed
    /// ones are compiled again, missing ones are removed. A version that no longer compiles
    /// here, or whose function names another library took, is skipped with a log line.
    fn install(&mut self, snapshot: Snapshot) {
        if snapshot.revision < lock(&self.shared.catalog).revision {
            return;
        }
        let wanted: HashMap<&str, &LibraryHistory> = snapshot
            .libraries
            .iter()
            .filter(|h| h.active().is_some())
            .map(|h| (h.name.as_str(), h))
            .collect();
        let stale: Vec<String> = self
            .libraries
            .iter()
            .filter(|(name, loaded)| {
                wanted
                    .get(name.as_str())
                    .and_then(|h| h.active())
                    .is_none_or(|active| {
                        active.version != loaded.version
                            || active.loaded_at_ms != loaded.loaded_at_ms
                    })
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            self.remove(&name);
        }
        let mut names: Vec<&str> = wanted.keys().copied().collect();
        names.sort_unstable();
        for name in names {
            if self.libraries.contains_key(name) {
                continue;
            }
            let Some(active) = wanted[name].active() else {
                continue;
            };
            match self.compile(&active.code) {
                Ok((_, functions)) => {
                    if let Some(taken) = functions
                        .iter()
                        .find(|f| self.functions.contains_key(&f.info.name))
                    {
                        store::log_line!(
                            "mantle: functions: {name}@{} not installed: function '{}' \
                             belongs to another library",
                            active.version,
                            taken.info.name
                        );
                        continue;
                    }
                    for f in &functions {
                        self.functions.insert(f.info.name.clone(), name.to_string());
                    }
                    self.libraries.insert(
                        name.to_string(),
                        Loaded {
                            version: active.version,
                            loaded_at_ms: active.loaded_at_ms,
                            functions,
                        },
                    );
                }
                Err(e) => store::log_line!(
                    "mantle: functions: {name}@{} not installed: {e}",
                    active.version
                ),
            }
        }
        let mut catalog = lock(&self.shared.catalog);
        catalog.revision = snapshot.revision;
        catalog.functions = self.functions.clone();
        catalog.libraries = self
            .libraries
            .iter()
            .map(|(name, loaded)| {
                let code = wanted
                    .get(name.as_str())
                    .and_then(|h| h.active())
                    .map(|a| a.code.clone())
                    .unwrap_or_default();
                (
                    name.clone(),
                    LibraryInfo {
                        name: name.clone(),
                        version: loaded.version,
                        code,
                        loaded_at_ms: loaded.loaded_at_ms,
                        functions: loaded.functions.iter().map(|f| f.info.clone()).collect(),
                    },
                )
            })
            .collect();
    }

    fn remove(&mut self, name: &str) {
        if let Some(loaded) = self.libraries.remove(name) {
            for f in loaded.functions {
                self.functions.remove(&f.info.name);
            }
        }
    }

    fn cache_script(&mut self, code: &[u8]) -> Result<String, String> {
        let sha = sha1_smol::Sha1::from(code).digest().to_string();
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        if code.len() > library::MAX_CODE_BYTES {
            return Err(format!(
                "ERR script of {} bytes exceeds the limit of {} bytes",
                code.len(),
                library::MAX_CODE_BYTES
            ));
        }
        let (body, no_writes) = script_body(code)?;
        policy::check_compile_cost("user_script", &body)
            .map_err(|e| format!("ERR Error compiling script: {e}"))?;
        let function = self
            .sandbox
            .lua()
            .load(&body[..])
            .set_name("@user_script")
            .set_mode(ChunkMode::Text)
            .set_environment(self.script_env.clone())
            .into_function()
            .map_err(|e| {
                format!(
                    "ERR Error compiling script (new function): {}",
                    one_line(&e.to_string())
                )
            })?;
        if self.scripts.len() >= MAX_SCRIPTS {
            self.scripts.clear();
            lock(&self.shared.catalog).scripts.clear();
        }
        self.scripts.insert(sha.clone(), (function, no_writes));
        lock(&self.shared.catalog).scripts.insert(sha.clone());
        Ok(sha)
    }

    fn call(
        &mut self,
        target: Target,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        read_only: bool,
        reply_limit: u64,
        calls: channel::Sender<CallRequest>,
    ) -> Outcome {
        let failed = |reply: String| Outcome {
            reply: Frame::Error(reply),
            wrote: false,
            stopped: false,
        };
        let (function, name, no_writes, is_script) = match target {
            Target::Function(name) => {
                let Some(found) = self.functions.get(&name).and_then(|library| {
                    self.libraries[library]
                        .functions
                        .iter()
                        .find(|f| f.info.name == name)
                }) else {
                    return failed("ERR Function not found".into());
                };
                (found.callback.clone(), name, found.info.no_writes(), false)
            }
            Target::Script { sha, code } => {
                if let Some(code) = code {
                    if let Err(e) = self.cache_script(&code) {
                        return failed(e);
                    }
                }
                let Some((function, no_writes)) = self.scripts.get(&sha) else {
                    return failed("NOSCRIPT No matching script. Please use EVAL.".into());
                };
                (function.clone(), sha, *no_writes, true)
            }
        };
        let lua = self.sandbox.lua();
        let strings = |items: &[Bytes]| -> mlua::Result<Table> {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, lua.create_string(item)?)?;
            }
            Ok(table)
        };
        let (keys_table, args_table) = match (strings(&keys), strings(&args)) {
            (Ok(k), Ok(a)) => (k, a),
            (Err(e), _) | (_, Err(e)) => {
                return failed(format!("ERR {}", one_line(&e.to_string())))
            }
        };
        if is_script {
            let _ = self.script_env.raw_set("KEYS", keys_table.clone());
            let _ = self.script_env.raw_set("ARGV", args_table.clone());
        }
        let wrote = Arc::new(AtomicBool::new(false));
        drop(keys);
        *lock(&self.active) = Some(Active {
            calls,
            read_only: read_only || no_writes,
            wrote: Arc::clone(&wrote),
        });
        *lock(&self.shared.running) = Some(Running {
            name: name.clone(),
            command: args.clone(),
            started: Instant::now(),
            wrote: Arc::clone(&wrote),
        });
        self.shared.interrupt.clear();
        self.sandbox.refill();
        let ran: mlua::Result<(bool, Value)> =
            self.trampoline.call((function, keys_table, args_table));
        // A budget, deadline, memory or FUNCTION KILL stop escapes the trampoline's pcall.
        let stopped = self.sandbox.stopped() || ran.is_err();
        let killed = self.shared.interrupt.is_set();
        *lock(&self.shared.running) = None;
        // Dropping the call's channel tells the caller the function has ended.
        lock(&self.active).take();
        let wrote = wrote.load(Ordering::Relaxed);
        if is_script {
            let _ = self.script_env.raw_set("KEYS", Value::Nil);
            let _ = self.script_env.raw_set("ARGV", Value::Nil);
        }
        let what = if is_script { "script" } else { "function" };
        let reply = match ran {
            Ok((true, value)) => {
                let mut budget = reply_limit.min(self.memory_limit);
                convert::to_frame(&value, &mut budget).unwrap_or_else(Frame::Error)
            }
            Ok((false, Value::Table(error))) => {
                let message = error.raw_get::<String>("err").unwrap_or_default();
                Frame::Error(error_line(&message))
            }
            Ok((false, error)) => {
                let message = match error {
                    Value::String(s) => s.to_string_lossy(),
                    _ => "unknown error".into(),
                };
                Frame::Error(error_line(&format!(
                    "{} {what}: {name}",
                    one_line(&message)
                )))
            }
            Err(e) if killed => Frame::err(format!(
                "{what} '{name}' was killed by FUNCTION KILL or SCRIPT KILL ({})",
                one_line(&e.to_string())
            )),
            Err(e) => Frame::err(format!(
                "{what} '{name}' was stopped: {}",
                one_line(&e.to_string())
            )),
        };
        Outcome {
            reply,
            wrote,
            stopped: stopped || killed,
        }
    }
}

/// The code of a script and whether it declared `flags=no-writes` on a `#!lua` line.
fn script_body(code: &[u8]) -> Result<(Vec<u8>, bool), String> {
    if !code.starts_with(b"#!") {
        return Ok((code.to_vec(), false));
    }
    let end = code.iter().position(|&b| b == b'\n').unwrap_or(code.len());
    let line = String::from_utf8_lossy(&code[2..end]).into_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Could not find engine '{engine}'"));
    }
    let mut no_writes = false;
    for part in parts {
        match part.split_once('=') {
            Some(("flags", flags)) => {
                for flag in flags.split(',').filter(|f| !f.is_empty()) {
                    if !KNOWN_FLAGS.contains(&flag) {
                        return Err(format!("ERR Unexpected flag in script shebang: {flag}"));
                    }
                    no_writes |= flag == "no-writes";
                }
            }
            _ => return Err(format!("ERR Unknown lua shebang option: {part}")),
        }
    }
    let mut body = b"--".to_vec();
    body.extend_from_slice(&code[end..]);
    Ok((body, no_writes))
}

/// Reads `redis.register_function`'s arguments: `(name, callback)` or a table with
/// `function_name`, `callback`, `flags` and `description`. Redis's error words.
fn register(args: MultiValue) -> Result<Registered, String> {
    let mut args = args.into_iter();
    let first = args.next().unwrap_or(Value::Nil);
    let (name, callback, flags, description) = match first {
        Value::Table(table) => {
            if args.next().is_some() {
                return Err("wrong number of arguments to redis.register_function".into());
            }
            let (mut name, mut callback, mut flags, mut description) =
                (None, None, Vec::new(), None);
            for pair in table.pairs::<Value, Value>() {
                let (key, value) = pair.map_err(|e| e.to_string())?;
                let key =
                    match key {
                        Value::String(s) => s.to_string_lossy(),
                        _ => return Err(
                            "named argument key given to redis.register_function is not a string"
                                .into(),
                        ),
                    };
                match (key.as_str(), value) {
                    ("function_name", Value::String(s)) => name = Some(s.to_string_lossy()),
                    ("callback", Value::Function(f)) => callback = Some(f),
                    ("description", Value::String(s)) => description = Some(s.to_string_lossy()),
                    ("flags", Value::Table(list)) => {
                        for flag in list.sequence_values::<Value>() {
                            match flag.map_err(|e| e.to_string())? {
                                Value::String(s) => {
                                    let flag = s.to_string_lossy();
                                    if !KNOWN_FLAGS.contains(&flag.as_str()) {
                                        return Err("unknown flag given".into());
                                    }
                                    flags.push(flag);
                                }
                                _ => return Err("unknown flag given".into()),
                            }
                        }
                    }
                    ("function_name" | "callback" | "description" | "flags", _) => {
                        return Err(format!(
                            "wrong type for argument '{key}' of redis.register_function"
                        ));
                    }
                    _ => return Err("unknown argument given to redis.register_function".into()),
                }
            }
            let Some(name) = name else {
                return Err("redis.register_function must get a function name argument".into());
            };
            let Some(callback) = callback else {
                return Err("redis.register_function must get a callback argument".into());
            };
            (name, callback, flags, description)
        }
        Value::String(name) => {
            let Some(Value::Function(callback)) = args.next() else {
                return Err("wrong number or type of arguments to redis.register_function".into());
            };
            if args.next().is_some() {
                return Err("wrong number of arguments to redis.register_function".into());
            }
            (name.to_string_lossy(), callback, Vec::new(), None)
        }
        _ => return Err("wrong number or type of arguments to redis.register_function".into()),
    };
    if !library::valid_name(&name) {
        return Err(
            "Function names can only contain letters, numbers, or underscores(_) and \
                    must be at least one character long"
                .into(),
        );
    }
    Ok(Registered {
        callback,
        info: FunctionInfo {
            name,
            description,
            flags,
        },
    })
}

/// An error message on one line (a Lua traceback would break the reply).
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or("").trim();
    let first = first.strip_prefix("runtime error: ").unwrap_or(first);
    let mut line: String = first
        .chars()
        .take(policy::Limits::MAX_ERROR_BYTES)
        .collect();
    if line.is_empty() {
        line = "error".into();
    }
    line
}
