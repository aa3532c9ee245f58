//! The one grammar for the sizes and durations every `mantle` flag takes, in `replay`,
//! `serve`, `analyze`, `gen` and the server's `CONFIG SET` alike, so a value that works for one
//! subcommand works, with the same meaning, for every other.
//!
//! - Sizes ([`parse_bytes`], [`CacheSize`]): a plain whole number, or a number with a unit
//!   (`B`, decimal `KB` `MB` `GB` `TB`, binary `KiB` `MiB` `GiB` `TiB`) that comes to a whole
//!   number of bytes: `64MiB`, `1.5GiB` and `0.5GB` are exact; `0.5` or `0.5B` are refused
//!   rather than rounded.
//! - Durations ([`parse_duration`]): a number with `ns`, `us`, `ms`, `s`, `m` (or `min`), `h`
//!   or `d` (`100ms`, `2s`, `1.5s`, `1m`), or a bare number of seconds; greater than zero and a
//!   whole number of nanoseconds.
//!
//! Numbers are plain decimals (no sign, no exponent). Every error message starts with the
//! input in quotes and says what was expected; clap (or the server) puts the flag in front.

mod duration;
mod size;

pub use duration::parse_duration;
pub use size::{parse_bytes, CacheSize};
