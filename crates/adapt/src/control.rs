//! The seam between the replay loop and whatever manages the cache at each decision tick
//! (a Lua policy in practice). The loop hands a controller the metrics of the tick and the
//! access log, and applies the actions it returns before the next request is served.

use cache::AccessLog;

/// Metrics of this node at a tick: the policy language's metric table (DESIGN.md §3), so a
/// controller hands them to a policy as they are. Counters are cumulative; `*rate` fields are
/// per second over the last tick; `capacity` is the target in objects (bytes when the cache
/// is limited by bytes only), infinite when unlimited; `load` is the request rate.
pub type TickMetrics = policy::Metrics;

/// What a controller sees at a tick.
pub struct TickContext<'a> {
    /// Trace seconds at the tick.
    pub now: f64,
    /// Tick number, from 1.
    pub tick: u64,
    pub metrics: &'a TickMetrics,
    pub access_log: &'a AccessLog,
}

/// The change to the cache a tick asks for: the policy crate's type, so the action a policy
/// returns is the one the loop applies, with no second enum kept in step by hand.
pub use policy::Action;

/// A controller's answer for one tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TickDecision {
    /// `Action::None` when the controller leaves the cache alone.
    pub action: Action,
    /// Set when the tick failed; the loop applies no action and counts the error.
    pub error: Option<String>,
}

/// Summary the replay reports under `policy`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ControllerSummary {
    pub name: String,
    pub version: Option<u64>,
    pub ticks: u64,
    pub actions: u64,
    pub errors: u64,
    /// Set when repeated failures made the engine fall back (to a previous version or none).
    pub fallback: Option<String>,
}

pub trait Controller {
    /// Whether the loop must keep the access log (`timeseries()`); it costs time per request.
    fn needs_access_log(&self) -> bool {
        true
    }
    /// Whether the loop must show the controller every request ([`Controller::observe`]);
    /// asked once, so a controller that does not watch requests costs nothing per request.
    fn observes_requests(&self) -> bool {
        false
    }
    /// A request just served, with the cache's object and byte counts after it (shadows of
    /// candidate policies are fed from here).
    fn observe(&mut self, _req: &trace::Request, _objects: u64, _bytes: u64) {}
    fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision;
    fn summary(&self) -> ControllerSummary;
}
