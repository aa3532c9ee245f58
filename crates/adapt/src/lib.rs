//! Adaptable policies (issue 17, seed 000 §VIII): a *shadow* runs a candidate policy version
//! (or the same policy with other parameters) on a metadata-only cache fed the access stream,
//! optionally sampling the key space, and reports what it would have done over sliding
//! windows; a *switch policy* (Lua, `switch(candidates, current)`) reads those figures and
//! names the version that should manage the real cache. Replay drives it through
//! [`Adaptive`], a [`Controller`]; the server feeds the same [`Shadow`] type. The controller
//! seam ([`control`]) lives here, below both hosts, so the server does not compile the
//! simulator to host shadows.

pub mod adaptive;
pub mod control;
pub mod sample;
pub mod shadow;
pub mod spec;
pub mod window;

pub use adaptive::{Adaptive, AdaptiveReport, CandidateReport, Segment};
pub use control::{Action, Controller, ControllerSummary, TickContext, TickDecision, TickMetrics};
pub use policy::switch::{Candidate, SwitchPolicy, WindowFigures};
pub use sample::Sampler;
pub use shadow::{Shadow, ShadowTotals};
pub use spec::ShadowSpec;
pub use window::Window;
