//! The runner's side of the shadows (`live::shadows` holds the shadows themselves): the
//! `POLICY SHADOW` and `POLICY SWITCH` commands, the shadows' tick (before the live policy's,
//! as replay ticks them), their report on `/metrics` and the dashboard, and the switch
//! policy's choice made active through the registry, as `POLICY PARAM` and `POLICY USE`
//! would make it (so the log, `ROLLBACK` and a cluster's propagation apply to it too).

use super::super::activation::no_such;
use super::super::journal::{Level, LogKind};
use super::super::reply::Reply;
use super::super::shadows::SwitchTo;
use super::super::Op;
use super::Runner;

impl Runner {
    /// Ticks the shadows (before the live policy, as replay does), logs what they report and
    /// makes the switch policy's choice active.
    pub(super) fn tick_shadows(&mut self, now: f64) {
        let running = self.running().cloned();
        let result = self
            .shadows
            .tick(now, self.tick, running.as_ref(), &self.params);
        for (level, message) in result.notes {
            self.note(level, LogKind::Shadow, "", &message);
        }
        if let Some(to) = result.switch_to {
            self.switch_to(to);
        }
        self.publish_shadows();
    }

    /// Activates what the switch policy chose through the registry, as POLICY PARAM and
    /// POLICY USE would (so the log, ROLLBACK and a cluster's propagation apply).
    fn switch_to(&mut self, to: SwitchTo) {
        let from = self.top_name();
        for (key, value) in &to.overrides {
            if self.params.get(key) == Some(value) {
                continue;
            }
            if let Err(e) = self.write(|r| r.set_param(key, value)) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &to.version.to_string(),
                    &message,
                );
                return;
            }
            self.note(
                Level::Info,
                LogKind::Param,
                "",
                &format!("{key}={value} (switch)"),
            );
            self.params.insert(key.clone(), value.clone());
            self.link.board.set_params(&self.params);
            self.shadows.set_param(key, value);
        }
        if self.running() != Some(&to.version) {
            if let Err(e) = self.push_and_activate(to.version.clone()) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &to.version.to_string(),
                    &message,
                );
                return;
            }
        }
        let message = format!(
            "at tick {}, from {from} to {}: {}",
            self.tick, to.candidate, to.reason
        );
        self.note(
            Level::Info,
            LogKind::Switched,
            &to.version.to_string(),
            &message,
        );
    }

    pub(super) fn publish_shadows(&self) {
        let report = self.shadows.report(self.running(), &self.params);
        self.db.metrics().shadows.publish(report);
    }

    pub(super) fn op_shadow(&mut self, op: Op) -> Result<Reply, String> {
        match op {
            Op::ShadowAdd {
                name,
                version,
                options,
            } => {
                let record = self
                    .registry
                    .version(&name, version)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| no_such(&name, version))?;
                let id = record.id();
                let added = self
                    .shadows
                    .add(id.clone(), record.source, &options, &self.params)?;
                self.note(
                    Level::Info,
                    LogKind::Shadow,
                    &id.to_string(),
                    &format!("shadow {added} added"),
                );
                Ok(Reply::Name(added))
            }
            Op::ShadowDrop { name } => {
                self.shadows.remove(&name)?;
                self.note(
                    Level::Info,
                    LogKind::Shadow,
                    "",
                    &format!("shadow {name} dropped"),
                );
                Ok(Reply::Done)
            }
            Op::ShadowList => {
                let report = self.shadows.report(self.running(), &self.params);
                Ok(Reply::Lines(
                    report
                        .candidates
                        .iter()
                        .filter(|c| c.role == "shadow")
                        .map(|c| {
                            format!(
                                "{} policy={} params={:?} sample={} max_objects={}{}",
                                c.name,
                                c.policy,
                                c.params,
                                c.sample,
                                c.max_objects,
                                if c.active { " active" } else { "" }
                            )
                        })
                        .collect(),
                ))
            }
            Op::ShadowStatus { name: None } => {
                self.shadows.drain();
                let report = self.shadows.report(self.running(), &self.params);
                Ok(Reply::Candidates(report.candidates))
            }
            Op::ShadowStatus { name: Some(name) } => {
                self.shadows.drain();
                let running = self.running().cloned();
                self.shadows
                    .status_of(&name, running.as_ref(), &self.params)
                    .map(|c| Reply::Candidate(Box::new(c)))
            }
            Op::SwitchLoad { source, options } => {
                let params = self.shadows.load_switch(&source, &options)?;
                let message = format!("switch policy loaded ({} bytes) {params}", source.len());
                self.note(Level::Info, LogKind::Switch, "", message.trim_end());
                Ok(Reply::Done)
            }
            Op::SwitchOff => {
                if self.shadows.unload_switch() {
                    self.note(Level::Info, LogKind::Switch, "", "switch policy unloaded");
                }
                Ok(Reply::Done)
            }
            Op::SwitchStatus => Ok(Reply::Switch(Box::new(
                self.shadows.report(self.running(), &self.params),
            ))),
            _ => Err("not a shadow command".into()),
        }
    }
}
