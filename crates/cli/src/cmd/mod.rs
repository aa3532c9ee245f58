//! One module per subcommand.

pub mod analyze;
pub mod cluster;
pub mod compare;
pub mod config_file;
pub mod gen;
pub mod nodes;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod replay_args;
pub mod replay_flags;
pub mod serve;
pub mod ticks;
pub mod trace_args;
