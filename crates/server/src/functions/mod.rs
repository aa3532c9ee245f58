//! Redis 7 functions and scripts (`FUNCTION`, `FCALL`, `EVAL`, `SCRIPT`): object interfaces
//! written in Lua that run inside the server, in the policy engine's sandbox, compose native
//! commands through `redis.call`, and are versioned (`LIB@N`) in the registry, which with
//! `--cluster` is etcd, so every node runs the same version (seed 003's interface
//! propagation). docs/functions.md is the user's side of this.
//!
//! The parts: `library` (the shebang, names, the versions record), `registry` (where records
//! live), `vm` (the thread that owns the Lua state and runs one function at a time),
//! `convert` (Lua ↔ reply), `exec` (the seam through which a function reaches the keyspace),
//! `catalog` (what is installed, readable while a function runs), `dump` (DUMP/RESTORE).
//!
//! Freshness, the one rule that makes propagation safe: a node runs a function only with
//! libraries installed at a registry revision no older than the registry's latest revision
//! read *after* the call arrived. Alone that is the node's own counter; in a cluster it is
//! one linearizable etcd read per call ([`Functions::catch_up`]), and `FUNCTION LOAD`
//! replies only after its etcd transaction committed. So once a client has the reply to a
//! LOAD, no node answers an `FCALL` with an older version of that library.

pub mod catalog;
pub mod convert;
pub mod dump;
pub mod exec;
pub mod library;
pub mod registry;
pub mod vm;

use crate::frame::Frame;
use bytes::Bytes;
use catalog::{FunctionInfo, LibraryInfo};
use exec::FunctionRun;
use exec::Outcome;
use library::LibraryHistory;
use registry::Registry;
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use tokio::sync::oneshot;
use vm::{lock, Job, Shared, Target};

/// `FUNCTION RESTORE`'s policy for libraries that already exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Refuse the payload if any library exists (the default).
    Append,
    /// Replace existing libraries of the same name.
    Replace,
    /// Delete every library first.
    Flush,
}

/// One node's functions: the handle connections use.
pub struct Functions {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    shared: Arc<Shared>,
    registry: OnceLock<Registry>,
    /// One catch-up at a time: concurrent calls that find the node behind wait for it.
    catching_up: tokio::sync::Mutex<()>,
}

impl Default for Functions {
    fn default() -> Functions {
        Functions::new()
    }
}

fn stopped() -> String {
    "ERR the functions engine is not running".into()
}

impl Functions {
    /// A handle with nothing installed; [`Functions::start`] starts the thread.
    pub fn new() -> Functions {
        Functions {
            jobs: Mutex::new(None),
            shared: Arc::new(Shared {
                catalog: Mutex::default(),
                running: Mutex::new(None),
                interrupt: policy::Interrupt::default(),
            }),
            registry: OnceLock::new(),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// Starts the functions thread under `limits` and installs every library of `registry`.
    pub async fn start(&self, registry: Registry, limits: policy::Limits) -> anyhow::Result<()> {
        let sender = vm::spawn(limits, Arc::clone(&self.shared))?;
        *lock(&self.jobs) = Some(sender);
        if self.registry.set(registry).is_err() {
            anyhow::bail!("the functions engine was started twice");
        }
        self.catch_up(true)
            .await
            .map_err(|e| anyhow::anyhow!("reading the function libraries: {e}"))?;
        Ok(())
    }

    fn registry(&self) -> Result<&Registry, String> {
        self.registry.get().ok_or_else(stopped)
    }

    async fn ask<T>(&self, job: impl FnOnce(oneshot::Sender<T>) -> Job) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        let sent = lock(&self.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job(tx)).is_ok());
        if !sent {
            return Err(stopped());
        }
        rx.await.map_err(|_| stopped())
    }

    /// Brings the installed libraries up to the registry's latest revision (read now);
    /// `force` installs a fresh snapshot even when the revision has not moved.
    pub async fn catch_up(&self, force: bool) -> Result<(), String> {
        let registry = self.registry()?;
        let latest = registry.revision().await?;
        if !force && lock(&self.shared.catalog).revision >= latest {
            return Ok(());
        }
        let _one = self.catching_up.lock().await;
        if !force && lock(&self.shared.catalog).revision >= latest {
            return Ok(());
        }
        let snapshot = registry.snapshot().await?;
        self.ask(|reply| Job::Install { snapshot, reply }).await
    }

    /// `FUNCTION LOAD [REPLACE]`: checks the code, stores it as the library's next version
    /// (durably: etcd's commit with `--cluster`), installs it; the library's name.
    pub async fn load(&self, code: String, replace: bool) -> Result<String, String> {
        if code.len() > library::MAX_CODE_BYTES {
            return Err(format!(
                "ERR library code of {} bytes exceeds the limit of {} bytes",
                code.len(),
                library::MAX_CODE_BYTES
            ));
        }
        let name = library::parse_shebang(&code)?.name;
        let checked = self
            .ask(|reply| Job::Check {
                code: code.clone(),
                reply,
            })
            .await??;
        self.catch_up(false).await?;
        self.check_names(&name, &checked, replace)?;
        let now = crate::db::now_ms();
        self.registry()?
            .update(&name, |history| {
                if history.active().is_some() && !replace {
                    return Err(format!("ERR Library '{name}' already exists"));
                }
                history.push(&code, now)
            })
            .await?;
        self.catch_up(true).await?;
        Ok(name)
    }

    /// Redis's checks against what is installed: the library exists (without REPLACE), or
    /// one of its functions belongs to another library.
    fn check_names(
        &self,
        name: &str,
        functions: &[FunctionInfo],
        replace: bool,
    ) -> Result<(), String> {
        let catalog = lock(&self.shared.catalog);
        if catalog.libraries.contains_key(name) && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        for function in functions {
            if let Some(owner) = catalog.functions.get(&function.name) {
                if owner != name {
                    return Err(format!("ERR Function {} already exists", function.name));
                }
            }
        }
        Ok(())
    }

    /// `FUNCTION DELETE`.
    pub async fn delete(&self, name: &str) -> Result<(), String> {
        self.registry()?
            .update(name, |history| {
                if history.active().is_none() {
                    return Err("ERR Library not found".into());
                }
                history.stack.clear();
                Ok(())
            })
            .await?;
        self.catch_up(true).await
    }

    /// `FUNCTION ROLLBACK`: the version now active.
    pub async fn rollback(&self, name: &str) -> Result<u32, String> {
        let version = self
            .registry()?
            .update(name, |history| {
                if history.active().is_none() {
                    return Err("ERR Library not found".into());
                }
                history.rollback()
            })
            .await?;
        self.catch_up(true).await?;
        Ok(version)
    }

    /// `FUNCTION VERSIONS`: the kept versions of a library, oldest first (the last active).
    pub async fn versions(&self, name: &str) -> Result<LibraryHistory, String> {
        self.registry()?
            .snapshot()
            .await?
            .libraries
            .into_iter()
            .find(|h| h.name == name && h.active().is_some())
            .ok_or_else(|| "ERR Library not found".into())
    }

    /// `FUNCTION FLUSH`: deletes every library (their version numbers are kept).
    pub async fn flush(&self) -> Result<(), String> {
        let snapshot = self.registry()?.snapshot().await?;
        for history in snapshot.libraries.iter().filter(|h| h.active().is_some()) {
            self.registry()?
                .update(&history.name, |h| {
                    h.stack.clear();
                    Ok(())
                })
                .await?;
        }
        self.catch_up(true).await
    }

    /// `FUNCTION DUMP`.
    pub fn dump(&self) -> Vec<u8> {
        let catalog = lock(&self.shared.catalog);
        let libraries: Vec<dump::DumpedLibrary> = catalog
            .libraries
            .values()
            .map(|l| dump::DumpedLibrary {
                name: l.name.clone(),
                code: l.code.clone(),
            })
            .collect();
        dump::encode(&libraries)
    }

    /// `FUNCTION RESTORE payload [APPEND|REPLACE|FLUSH]`: every library is checked before
    /// any is stored.
    pub async fn restore(&self, payload: &[u8], policy: RestorePolicy) -> Result<(), String> {
        let libraries = dump::decode(payload)?;
        for library in &libraries {
            let name = library::parse_shebang(&library.code)?.name;
            if name != library.name {
                return Err("ERR payload version or checksum are wrong".into());
            }
            self.ask(|reply| Job::Check {
                code: library.code.clone(),
                reply,
            })
            .await??;
        }
        self.catch_up(false).await?;
        if policy == RestorePolicy::Append {
            let catalog = lock(&self.shared.catalog);
            if let Some(existing) = libraries
                .iter()
                .find(|l| catalog.libraries.contains_key(&l.name))
            {
                return Err(format!("ERR Library {} already exists", existing.name));
            }
        }
        if policy == RestorePolicy::Flush {
            self.flush().await?;
        }
        let now = crate::db::now_ms();
        for library in &libraries {
            self.registry()?
                .update(&library.name, |history| history.push(&library.code, now))
                .await?;
        }
        self.catch_up(true).await
    }

    /// The installed libraries whose name matches `pattern` (Redis's glob), by name.
    pub fn list(&self, pattern: Option<&[u8]>) -> Vec<LibraryInfo> {
        lock(&self.shared.catalog)
            .libraries
            .values()
            .filter(|l| pattern.is_none_or(|p| glob_match(p, l.name.as_bytes())))
            .cloned()
            .collect()
    }

    /// Libraries and functions installed.
    pub fn counts(&self) -> (usize, usize) {
        let catalog = lock(&self.shared.catalog);
        (catalog.libraries.len(), catalog.functions.len())
    }

    /// The running function or script: its name, the arguments it was called with and how
    /// long it has run.
    pub fn running(&self) -> Option<(String, Vec<Bytes>, std::time::Duration)> {
        lock(&self.shared.running)
            .as_ref()
            .map(|r| (r.name.clone(), r.command.clone(), r.started.elapsed()))
    }

    /// `FUNCTION KILL` / `SCRIPT KILL`: stops the running function at its next budget check,
    /// unless it has written (Redis's rule: its writes would be left half done).
    pub fn kill(&self) -> Result<(), String> {
        let running = lock(&self.shared.running);
        let Some(running) = running.as_ref() else {
            return Err("NOTBUSY No scripts in execution right now.".into());
        };
        if running.wrote.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(
                "UNKILLABLE The busy script was sending a write command to the \
                        dataset; it runs until its instruction budget or time limit stops it."
                    .into(),
            );
        }
        self.shared.interrupt.interrupt();
        Ok(())
    }

    /// Whether the function `name` is read-only (`no-writes`); `None` if it is not installed.
    pub fn is_read_only(&self, name: &str) -> Option<bool> {
        lock(&self.shared.catalog)
            .function(name)
            .map(|(_, f)| f.no_writes())
    }

    /// `FCALL` / `FCALL_RO`: starts function `name` (the caller has caught up with
    /// [`Functions::catch_up`] and holds the keys); the caller serves its calls. `Err`: it
    /// did not start, and this is the outcome.
    pub fn fcall(
        &self,
        name: &str,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        read_only: bool,
        reply_limit: u64,
    ) -> Result<FunctionRun, Outcome> {
        if read_only && self.is_read_only(name) == Some(false) {
            return Err(failed(
                "ERR Can not execute a script with write flag using *_ro command.".into(),
            ));
        }
        let target = Target::Function(name.to_string());
        self.run(target, keys, args, read_only, reply_limit)
    }

    /// `EVAL` (with `code`) / `EVALSHA` (without).
    pub fn eval(
        &self,
        sha: String,
        code: Option<Bytes>,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        read_only: bool,
        reply_limit: u64,
    ) -> Result<FunctionRun, Outcome> {
        let target = Target::Script { sha, code };
        self.run(target, keys, args, read_only, reply_limit)
    }

    /// Hands a call to the functions thread; one `redis.call` in flight at a time.
    fn run(
        &self,
        target: Target,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        read_only: bool,
        reply_limit: u64,
    ) -> Result<FunctionRun, Outcome> {
        let (calls, calls_rx) = tokio::sync::mpsc::channel(1);
        let (reply, outcome) = oneshot::channel();
        let job = Job::Call {
            target,
            keys,
            args,
            read_only,
            reply_limit,
            calls,
            reply,
        };
        let sent = lock(&self.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            return Err(failed(stopped()));
        }
        Ok(FunctionRun {
            calls: calls_rx,
            outcome,
        })
    }

    /// `SCRIPT LOAD`: the script's SHA-1.
    pub async fn load_script(&self, code: Bytes) -> Result<String, String> {
        self.ask(|reply| Job::LoadScript { code, reply }).await?
    }

    pub fn script_exists(&self, sha: &[u8]) -> bool {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        lock(&self.shared.catalog).scripts.contains(&sha)
    }

    pub fn flush_scripts(&self) {
        if let Some(jobs) = lock(&self.jobs).as_ref() {
            let _ = jobs.send(Job::FlushScripts);
        }
        lock(&self.shared.catalog).scripts.clear();
    }
}

impl Drop for Functions {
    fn drop(&mut self) {
        // A function still running stops at its next budget check; the thread then ends
        // with its channel.
        self.shared.interrupt.interrupt();
    }
}

fn failed(reply: String) -> Outcome {
    Outcome {
        reply: Frame::Error(reply),
        wrote: false,
        stopped: false,
    }
}

/// The SHA-1 of a script, lowercase hex, as `EVALSHA` names it.
pub fn script_sha(code: &[u8]) -> String {
    sha1_smol::Sha1::from(code).digest().to_string()
}

/// Redis's glob (`*`, `?`, `[...]`, `\` escapes), for `LIBRARYNAME`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let (mut star_p, mut star_t) = (None, 0);
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star_p = Some(p);
                    star_t = t;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class_match(pattern, p, text[t]) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == text[t] => {
                    p += 2;
                    t += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star_p {
            Some(sp) => {
                p = sp + 1;
                star_t += 1;
                t = star_t;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether `c` is in the class starting at `pattern[at] == b'['`, and where the class ends.
fn class_match(pattern: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= pattern[i] == c;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_matches_like_redis() {
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"rate*", b"ratelimit"));
        assert!(!glob_match(b"rate*", b"writeonce"));
        assert!(glob_match(b"w?iteonce", b"writeonce"));
        assert!(glob_match(b"[rw]*", b"writeonce"));
        assert!(!glob_match(b"[^rw]*", b"writeonce"));
        assert!(glob_match(b"a\\*", b"a*"));
        assert!(!glob_match(b"a\\*", b"ab"));
    }
}
