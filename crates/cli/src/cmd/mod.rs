//! One module per subcommand.

pub mod analyze;
pub mod compare;
pub mod gen;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod runs;
pub mod serve;
pub mod ticks;
pub mod trace_args;
