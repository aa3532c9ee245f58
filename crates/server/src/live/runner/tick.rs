//! One tick of the live policy: the server's metrics and access series handed to the
//! engine, the shadows ticked first (as replay ticks them), the decision applied to the cache
//! through `live::actions`, a cluster told how the tick went, and a fallback the engine made
//! followed by the activation stack. `POLICY TICK` (manual ticks) runs one and replies with
//! what it did.

use super::super::actions;
use super::super::journal::{Level, LogKind};
use super::super::reply::{Reply, TickReport};
use super::Runner;
use crate::metrics::Stats;
use policy::{Action, TickInput};

impl Runner {
    /// Runs one tick; returns the action applied in replay's notation (`capacity:N`,
    /// `evict:N`, empty for none) and the error, if the policy failed.
    pub(super) fn run_tick(&mut self) -> (String, Option<String>) {
        self.tick += 1;
        let series = self.db.series();
        let now = series.clock.now();
        let at = if self.settings.manual {
            now
        } else {
            self.started.elapsed().as_secs_f64()
        };
        let metrics = self.sampler.sample(&self.db, at);
        series.drain_into(&mut self.log, &mut self.spare);
        if let Some(failure) = self.db.take_hook_failure() {
            let message = format!("per-request hook {failure}; the cache falls back to LRU");
            self.note(Level::Error, LogKind::Error, "", &message);
        }
        self.tick_shadows(now);
        if self.activation.running().is_none() || self.engine.active().is_none() {
            return (String::new(), None);
        }
        let own = [metrics];
        let shared = self.settings.shared.clone();
        let cluster = shared.as_ref().and_then(|s| s.cluster_env(&own[0], now));
        if let (Some(shared), Some(_)) = (&shared, &cluster) {
            self.engine.set_slots(shared.cluster_slots());
            self.engine.set_sequencers(shared.cluster_sequencers());
        }
        let (servers, whoami) = cluster
            .as_ref()
            .map_or((&own[..], 0), |(s, w)| (&s[..], *w));
        let input = TickInput {
            now,
            tick: self.tick,
            whoami,
            servers,
            params: &self.params,
            timeseries: &self.log,
        };
        let outcome = self.engine.tick(&input);
        if self.link.watch.is_abandoned() {
            return (String::new(), None);
        }
        self.relay_logs();
        let policy = outcome
            .policy
            .as_ref()
            .map(|id| id.to_string())
            .unwrap_or_default();
        let error = outcome.error.as_ref().map(|e| e.to_string());
        if let Some(error) = &error {
            self.last_error = error.clone();
        }
        let applied = match outcome.decision.action {
            Action::None => String::new(),
            Action::Evict(n) => format!("evict:{n}"),
            Action::SetCapacity(n) => format!("capacity:{n}"),
        };
        let applied_now = actions::apply(&self.db, outcome.decision.action);
        if let Some(message) = &applied_now.capacity_change {
            self.note(Level::Info, LogKind::Capacity, &policy, message);
        }
        self.last_decision = applied_now.decision;
        if let (Some(shared), Some(_)) = (&shared, &cluster) {
            let failed = error.is_some();
            shared.after_cluster_tick(
                self.tick,
                &servers[whoami],
                &outcome.decision,
                &policy,
                failed,
            );
        } else if !outcome.decision.targets.is_empty() && !self.warned_where {
            self.warned_where = true;
            self.note(
                Level::Warn,
                LogKind::Log,
                &policy,
                "where() asked to move load to other servers; ignored on a single node",
            );
        }
        if let Some(fallback) = outcome.fallback {
            // The engine already runs the version below; the stack follows it.
            let from = fallback.from.to_string();
            let loaded =
                self.activation
                    .follow_fallback(&fallback, &mut self.engine, &self.registry);
            let to = self.top_name();
            let message = format!(
                "{from} failed {} consecutive ticks; reinstated {to}",
                self.settings.limits.max_consecutive_failures
            );
            self.note(Level::Warn, LogKind::RolledBack, &from, &message);
            if let Err(e) = self.write(|r| r.set_history(self.activation.stack())) {
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &from,
                    &format!("rollback not persisted: {e}"),
                );
            }
            self.adopt(loaded);
        }
        self.persist_states();
        self.update_gauges();
        (applied, error)
    }

    /// `POLICY TICK [now]` (manual ticks only): sets the clock, runs one tick, and replies
    /// with what it did and the cache's figures after it.
    pub(super) fn op_tick(&mut self, now: Option<f64>) -> Result<Reply, String> {
        if !self.settings.manual {
            return Err("POLICY TICK needs a server started with --tick manual".into());
        }
        if let Some(now) = now {
            self.db.series().clock.set(now)?;
        }
        let (action, error) = self.run_tick();
        let snapshot = self.db.cache_snapshot();
        let stats = self.db.stats();
        Ok(Reply::Tick(Box::new(TickReport {
            tick: self.tick,
            now: self.db.series().clock.now(),
            action,
            error,
            cache_objects: snapshot.objects,
            cache_bytes: snapshot.bytes,
            capacity_objects: snapshot.capacity.objects,
            capacity_bytes: snapshot.capacity.bytes,
            hits: Stats::read(&stats.cache_hits),
            misses: Stats::read(&stats.cache_misses),
            evictions: snapshot.evictions,
            store_reads: Stats::read(&stats.store_reads),
            store_writes: Stats::read(&stats.store_writes),
            series_events: self.log.len() as u64,
            series_keys: self.log.distinct_keys(),
        })))
    }
}
