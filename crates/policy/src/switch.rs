//! Switch policies: a Lua chunk defining `switch(candidates, current)` that, at every tick,
//! sees the windowed figures of every candidate version (each run in shadow) and of the
//! version managing the real cache, and names the version that should be active. It runs in
//! the same sandbox, under the same limits, with the same `log`, `WRstate`/`RDstate` and
//! `params` as any policy; a failing call keeps the active version (and is counted).

use std::sync::{Arc, Mutex};

use mlua::{ChunkMode, Function, Lua, Value};
use serde::Serialize;

use crate::budget::{Budget, Interrupt};
use crate::error::{line_of, root_message, LoadError, PolicyId};
use crate::host::{HostShared, LogRecord};
use crate::limits::Limits;
use crate::program::{describe, install_host_functions};
use crate::sandbox;
use crate::series_object::SeriesSlot;
use crate::value::{Params, Scalar};

/// What one version did (or would have done) over the last window of ticks. Sizes and counts
/// of a sampled shadow are scaled to the whole key space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WindowFigures {
    /// Ticks in the window (fewer than the window's length at the start).
    pub ticks: u64,
    /// Lookups (gets and accesses) in the window.
    pub lookups: f64,
    pub hits: f64,
    /// Misses: the back-end reads this version causes.
    pub misses: f64,
    /// `hits / lookups`; 0 without lookups.
    pub hit_ratio: f64,
    /// `misses / lookups`; 0 without lookups.
    pub miss_ratio: f64,
    /// The miss ratio of the window before this one (the same length, just older); equal to
    /// `miss_ratio` until two windows have passed. Tells progress from stagnation.
    pub prev_miss_ratio: f64,
    /// Request-weighted mean and the peak of the cached objects and bytes.
    pub mean_objects: f64,
    pub peak_objects: f64,
    /// The request-weighted mean of the cached objects over the newest tick alone (the
    /// window's mean when that tick served nothing): what the cache holds now, which a switch
    /// would hand the real cache, where the window's mean still carries the older ticks.
    pub last_objects: f64,
    pub mean_bytes: f64,
    pub peak_bytes: f64,
    /// Objects evicted in the window (by capacity or by the policy).
    pub evictions: f64,
    /// Ticks whose decision acted on the cache, and ticks that failed.
    pub decisions: u64,
    pub errors: u64,
}

/// One entry of the table `switch()` receives.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub name: &'a str,
    /// Whether this version manages the real cache now.
    pub active: bool,
    /// Share of the key space its shadow sees (1 = unsampled).
    pub sample: f64,
    pub figures: &'a WindowFigures,
}

/// A loaded switch policy.
pub struct SwitchPolicy {
    id: PolicyId,
    lua: Lua,
    budget: Arc<Budget>,
    limits: Limits,
    host: Arc<Mutex<HostShared>>,
    switch: Function,
    calls: u64,
    errors: u64,
    // Declared last: the Lua state holds its address and must be dropped first.
    _slot: Box<SeriesSlot>,
}

impl SwitchPolicy {
    /// Compiles `source` (named `name`), runs its top level with `params` and finds
    /// `switch`; a chunk without it is rejected.
    pub fn load(
        name: &str,
        chunk_name: &str,
        source: &str,
        params: &Params,
        limits: Limits,
    ) -> Result<SwitchPolicy, LoadError> {
        let setup = |e: mlua::Error| LoadError::Run {
            message: format!("{chunk_name}: cannot set up the policy sandbox: {e}"),
            line: None,
        };
        let id = PolicyId {
            name: name.to_string(),
            version: 1,
        };
        let host = Arc::new(Mutex::new(HostShared::default()));
        let (lua, budget) = sandbox::new_state(&limits, Interrupt::default()).map_err(setup)?;
        let slot = SeriesSlot::new();
        install_host_functions(&lua, &id, &host, &slot, &budget).map_err(setup)?;
        set_params(&lua, params).map_err(setup)?;
        let chunk = lua
            .load(source)
            .set_name(chunk_name)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let message = root_message(&e);
                LoadError::Compile {
                    line: line_of(&message),
                    message,
                }
            })?;
        budget.refill();
        if let Err(e) = chunk.call::<Value>(()) {
            let message = describe(&e, &budget, &limits);
            return Err(LoadError::Run {
                line: line_of(&message),
                message: format!("{chunk_name}: {message}"),
            });
        }
        let switch = match lua.globals().raw_get::<Value>("switch") {
            Ok(Value::Function(f)) => f,
            _ => {
                return Err(LoadError::Run {
                    message: format!(
                        "{}: a switch policy defines switch(candidates, current)",
                        chunk_name.trim_start_matches(['@', '='])
                    ),
                    line: None,
                })
            }
        };
        Ok(SwitchPolicy {
            id,
            lua,
            budget,
            limits,
            host,
            switch,
            calls: 0,
            errors: 0,
            _slot: slot,
        })
    }

    /// Loads the switch policy in `path`, named after the file stem.
    pub fn load_file(
        path: &std::path::Path,
        params: &Params,
        limits: Limits,
    ) -> Result<SwitchPolicy, LoadError> {
        let source = crate::read_policy_source(path).map_err(|message| LoadError::Io {
            path: path.display().to_string(),
            message,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "switch".to_string());
        SwitchPolicy::load(
            &name,
            &format!("@{}", path.display()),
            &source,
            params,
            limits,
        )
    }

    pub fn id(&self) -> &PolicyId {
        &self.id
    }

    /// Calls `switch(candidates, current)`. `Ok(Some(name))`: activate that candidate;
    /// `Ok(None)`: keep the active one. An error (or a name that is no candidate) decides
    /// nothing and is counted.
    pub fn choose(
        &mut self,
        now: f64,
        tick: u64,
        candidates: &[Candidate<'_>],
        current: &Candidate<'_>,
    ) -> Result<Option<String>, String> {
        self.calls += 1;
        self.host.lock().map(|mut h| h.logs.start_tick()).ok();
        let result = self.call(now, tick, candidates, current);
        if result.is_err() {
            self.errors += 1;
        }
        result
    }

    fn call(
        &self,
        now: f64,
        tick: u64,
        candidates: &[Candidate<'_>],
        current: &Candidate<'_>,
    ) -> Result<Option<String>, String> {
        self.budget.refill();
        let lua_err = |e: mlua::Error| describe(&e, &self.budget, &self.limits);
        let g = self.lua.globals();
        g.raw_set("now", now).map_err(lua_err)?;
        g.raw_set("tick", tick).map_err(lua_err)?;
        g.raw_set("active", current.name).map_err(lua_err)?;
        let list = self
            .lua
            .create_table_with_capacity(candidates.len(), 0)
            .map_err(lua_err)?;
        for (i, c) in candidates.iter().enumerate() {
            list.raw_set(i + 1, self.candidate_table(c).map_err(lua_err)?)
                .map_err(lua_err)?;
        }
        let current_table = self.candidate_table(current).map_err(lua_err)?;
        self.budget.refill();
        let value = self
            .switch
            .call::<Value>((list, current_table))
            .map_err(lua_err)?;
        self.budget.refill();
        match value {
            Value::Nil => Ok(None),
            Value::String(s) => {
                let name = s.to_string_lossy();
                if name == current.name || candidates.iter().any(|c| c.name == name) {
                    Ok(Some(name))
                } else {
                    Err(format!("switch() returned '{name}', which is no candidate"))
                }
            }
            other => Err(format!(
                "switch() must return a candidate's name or nil, not a {}",
                other.type_name()
            )),
        }
    }

    fn candidate_table(&self, c: &Candidate<'_>) -> mlua::Result<mlua::Table> {
        let f = c.figures;
        let t = self.lua.create_table_with_capacity(0, 21)?;
        t.raw_set("name", c.name)?;
        t.raw_set("active", c.active)?;
        t.raw_set("sample", c.sample)?;
        t.raw_set("ticks", f.ticks)?;
        for (k, v) in [
            ("lookups", f.lookups),
            ("hits", f.hits),
            ("misses", f.misses),
            ("hit_ratio", f.hit_ratio),
            ("miss_ratio", f.miss_ratio),
            ("prev_miss_ratio", f.prev_miss_ratio),
            ("mean_objects", f.mean_objects),
            ("peak_objects", f.peak_objects),
            ("last_objects", f.last_objects),
            ("mean_bytes", f.mean_bytes),
            ("peak_bytes", f.peak_bytes),
            ("evictions", f.evictions),
            ("decisions", f.decisions as f64),
            ("errors", f.errors as f64),
        ] {
            t.raw_set(k, v)?;
        }
        Ok(t)
    }

    /// Log lines the policy wrote since the last drain, and how many were dropped.
    pub fn drain_logs(&mut self) -> (Vec<LogRecord>, u64) {
        self.host
            .lock()
            .map(|mut h| h.logs.drain())
            .unwrap_or_default()
    }

    /// Calls made and calls that failed.
    pub fn stats(&self) -> (u64, u64) {
        (self.calls, self.errors)
    }
}

fn set_params(lua: &Lua, params: &Params) -> mlua::Result<()> {
    let t = lua.create_table()?;
    for (k, v) in params {
        match v {
            Scalar::Number(n) => t.raw_set(k.as_str(), *n)?,
            Scalar::Bool(b) => t.raw_set(k.as_str(), *b)?,
            Scalar::Str(s) => t.raw_set(k.as_str(), s.as_str())?,
        }
    }
    lua.globals().raw_set("params", t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(miss_ratio: f64) -> WindowFigures {
        WindowFigures {
            ticks: 1,
            lookups: 100.0,
            misses: miss_ratio * 100.0,
            miss_ratio,
            ..WindowFigures::default()
        }
    }

    #[test]
    fn switch_sees_candidates_and_names_one() {
        let src = "function switch(c, cur)\n\
                   local best = cur\n\
                   for _, x in ipairs(c) do if x.miss_ratio < best.miss_ratio then best = x end end\n\
                   if best.name ~= active then log(2, 'to', best.name) return best.name end\n\
                   end";
        let mut p =
            SwitchPolicy::load("s", "=s.lua", src, &Params::new(), Limits::default()).unwrap();
        let (a, b) = (figures(0.5), figures(0.2));
        let cands = [
            Candidate {
                name: "a",
                active: true,
                sample: 1.0,
                figures: &a,
            },
            Candidate {
                name: "b",
                active: false,
                sample: 1.0,
                figures: &b,
            },
        ];
        assert_eq!(
            p.choose(1.0, 1, &cands, &cands[0]),
            Ok(Some("b".to_string()))
        );
        assert_eq!(p.drain_logs().0[0].message, "to b");
        assert_eq!(p.choose(2.0, 2, &cands, &cands[1]), Ok(None));
    }

    #[test]
    fn policy_check_accepts_a_switch_policy() {
        let report = crate::check::check_source(
            "s.lua",
            "function switch(c, cur) return nil end",
            &Limits::default(),
        );
        assert!(report.ok(), "{report}");
        assert_eq!(report.callbacks, ["switch"]);
        let report = crate::check::check_source("s.lua", "x = 1", &Limits::default());
        assert!(!report.ok());
    }

    #[test]
    fn bad_results_and_missing_callback_are_errors() {
        let err = SwitchPolicy::load("s", "=s.lua", "x = 1", &Params::new(), Limits::default())
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("switch(candidates, current)"),
            "{err}"
        );
        let mut p = SwitchPolicy::load(
            "s",
            "=s.lua",
            "function switch() return 'zzz' end",
            &Params::new(),
            Limits::default(),
        )
        .unwrap();
        let a = figures(0.1);
        let c = Candidate {
            name: "a",
            active: true,
            sample: 1.0,
            figures: &a,
        };
        assert!(p
            .choose(1.0, 1, &[c], &c)
            .unwrap_err()
            .contains("no candidate"));
        let mut p = SwitchPolicy::load(
            "s",
            "=s.lua",
            "function switch() while true do end end",
            &Params::new(),
            Limits {
                instructions: 100_000,
                ..Limits::default()
            },
        )
        .unwrap();
        assert!(p
            .choose(1.0, 1, &[c], &c)
            .unwrap_err()
            .contains("instruction budget"));
        assert_eq!(p.stats(), (1, 1));
    }
}
