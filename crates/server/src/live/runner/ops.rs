//! The `POLICY` requests the engine thread answers (those that need the Lua state or change
//! what runs; the control thread answers the rest): load a version, use one, roll back,
//! adopt a cluster's registry, the status it publishes, the unreadable records, and the
//! shadow commands (handed to `shadow_ops`).

use super::super::activation::no_such;
use super::super::journal::{Level, LogKind};
use super::super::registry::{self, VersionRecord};
use super::super::reply::{Reply, Status};
use super::super::Op;
use super::{op_name, Runner};
use crate::db::now_ms;
use policy::{PolicyEngine, PolicyId};
use std::collections::BTreeMap;

impl Runner {
    pub(super) fn handle(&mut self, op: Op) -> Result<Reply, String> {
        let result = match op {
            Op::Load {
                name,
                source,
                author,
            } => self.op_load(&name, &source, &author),
            Op::Use { name, version } => self.op_use(&name, version),
            Op::Tick { now } => self.op_tick(now),
            Op::Sync => self.op_sync(),
            Op::Unreadable => self
                .registry
                .unreadable()
                .map(|found| {
                    Reply::Lines(
                        found
                            .into_iter()
                            .map(|u| format!("{} {}", u.key, u.error))
                            .collect(),
                    )
                })
                .map_err(|e| e.to_string()),
            Op::DropUnreadable { key } => {
                self.registry
                    .drop_unreadable(&key)
                    .map_err(|e| e.to_string())?;
                self.note(
                    Level::Warn,
                    LogKind::Dropped,
                    "",
                    &format!("unreadable registry record '{key}' deleted"),
                );
                Ok(Reply::Done)
            }
            Op::List
            | Op::Show { .. }
            | Op::Rollback
            | Op::Status
            | Op::Param { .. }
            | Op::Log { .. } => Err(format!(
                "POLICY {} is answered by the control thread",
                op_name(&op)
            )),
            op @ (Op::ShadowAdd { .. }
            | Op::ShadowList
            | Op::ShadowStatus { .. }
            | Op::ShadowDrop { .. }
            | Op::SwitchLoad { .. }
            | Op::SwitchOff
            | Op::SwitchStatus) => self.op_shadow(op),
        };
        self.update_gauges();
        self.publish_shadows();
        result
    }

    fn op_load(&mut self, name: &str, source: &str, author: &str) -> Result<Reply, String> {
        registry::validate_name(name)?;
        if source.len() > registry::MAX_SOURCE_BYTES {
            return Err(format!(
                "policy source is {} bytes; at most {} accepted",
                source.len(),
                registry::MAX_SOURCE_BYTES
            ));
        }
        let record = self.store_version(name, source, author)?;
        self.push_and_activate(record.id())?;
        Ok(Reply::Version(record.version))
    }

    /// Compiles `source` on a scratch engine (so a bad version never touches the running
    /// one), then stores it as the next version of `name`.
    pub(super) fn store_version(
        &mut self,
        name: &str,
        source: &str,
        author: &str,
    ) -> Result<VersionRecord, String> {
        let next = self
            .registry
            .next_version(name)
            .map_err(|e| e.to_string())?;
        let label = format!("{name}@{next}");
        let mut scratch =
            PolicyEngine::with_interrupt(self.settings.limits, self.link.interrupt.clone());
        if let Err(e) =
            scratch.load_version(PolicyId::new(name, next), &format!("={label}"), source)
        {
            let running = self
                .activation
                .top()
                .map_or("no policy is running".to_string(), |r| {
                    format!("{r} keeps running")
                });
            self.note(
                Level::Error,
                LogKind::Rejected,
                &label,
                &format!("{e}; {running}"),
            );
            return Err(format!("policy rejected: {e}"));
        }
        let record = self.write(|r| r.add_version(name, source, author, now_ms()))?;
        self.note(
            Level::Info,
            LogKind::Loaded,
            &record.id().to_string(),
            &format!("stored by {author}, {} bytes", source.len()),
        );
        Ok(record)
    }

    fn op_use(&mut self, name: &str, version: Option<u32>) -> Result<Reply, String> {
        let record = self
            .registry
            .version(name, version)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| no_such(name, version))?;
        if self.activation.top() != Some(&record.id()) {
            self.push_and_activate(record.id())?;
        } else if self.activation.is_suspended() {
            self.activate()?;
            self.activation.resume();
            self.note(
                Level::Info,
                LogKind::Activated,
                &record.id().to_string(),
                "resumed",
            );
        }
        Ok(Reply::Version(record.version))
    }

    pub(super) fn op_rollback(&mut self) -> Result<Reply, String> {
        let Some(from) = self.activation.top().cloned() else {
            return Err("no policy is active; nothing to roll back".into());
        };
        let to = self.pop_stack()?;
        self.note(
            Level::Info,
            LogKind::RolledBack,
            &from.to_string(),
            &format!("by POLICY ROLLBACK; reinstated {to}"),
        );
        self.activate()?;
        Ok(Reply::Reinstated(to))
    }

    /// Adopts the shared registry's activation stack and parameters after another node
    /// changed them: every node of a cluster runs the same version.
    fn op_sync(&mut self) -> Result<Reply, String> {
        let (history, params) = self.registry.snapshot().map_err(|e| e.to_string())?;
        if params != self.params {
            for (key, value) in &params {
                self.shadows.set_param(key, value);
            }
            self.params = params;
            self.link.board.set_params(&self.params);
        }
        if history == self.activation.stack() {
            return Ok(Reply::Done);
        }
        let top_changed = self.activation.adopt(history);
        let top = self.top_name();
        match self.activate() {
            Ok(()) if top_changed => self.note(
                Level::Info,
                LogKind::Activated,
                &top,
                "from the cluster's registry",
            ),
            Ok(()) => {}
            Err(e) => self.note(
                Level::Error,
                LogKind::Error,
                &top,
                &format!("cannot run the cluster's active version here: {e}"),
            ),
        }
        Ok(Reply::Done)
    }

    pub(super) fn op_status(&self) -> Status {
        let stats = self.engine.stats();
        let suspended = match (self.activation.is_suspended(), self.activation.top()) {
            (true, Some(top)) => top.to_string(),
            _ => String::new(),
        };
        let previous = self
            .activation
            .below_top()
            .map_or(String::new(), ToString::to_string);
        Status {
            active: self.running().map_or(String::new(), |r| r.to_string()),
            previous,
            tick_ms: self.settings.tick.as_millis() as u64,
            ticks: stats.ticks,
            actions: stats.actions,
            errors: stats.errors,
            fallbacks: stats.fallbacks,
            last_decision: self.last_decision.clone(),
            last_error: self.last_error.clone(),
            durable: self.registry.is_durable(),
            suspended,
            activated_at_us: self.activation.activated_at_us(),
            params: BTreeMap::new(), // the board keeps them (see `control::Board`)
            busy_ms: 0,
            busy_with: String::new(),
        }
    }
}
