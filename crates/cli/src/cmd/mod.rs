//! One module per subcommand.

pub mod analyze;
pub mod compare;
pub mod gen;
pub mod nodes;
pub mod policy;
pub mod replay;
pub mod runs;
pub mod serve;
pub mod trace_args;
