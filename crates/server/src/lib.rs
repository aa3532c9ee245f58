//! Mantle's cache tier: a Redis-protocol (RESP2/RESP3) server whose cache, managed by the
//! eviction algorithms of `crates/cache`, sits in front of a store that holds every key —
//! embedded RocksDB, or an upstream tier such as another Mantle or a Redis server.
//!
//! Layers, from the socket inwards: [`connection`] (buffers) → [`decoder`] (bytes to
//! requests) → [`cmd`] (one module per command, reading its arguments with [`parse`]) →
//! [`db`] (cache + store coherence) → [`keytable`] (keys and values, by the cache's slot for
//! the key's hash) and [`store`] (RocksDB or upstream). [`frame`] is what replies are made
//! of. [`live`] runs Lua policies on the live cache, managed through a durable registry, and
//! [`http`] serves Prometheus metrics and the live dashboard. See `docs/server.md` and
//! `docs/operations.md` for running it.
//!
//! ```no_run
//! use server::{Backend, Config, Fsync};
//! let mut config = Config::new(Backend::RocksDb { data_dir: "data".into(), fsync: Fsync::EverySec });
//! config.max_keys = Some(100_000);
//! server::serve(config).unwrap(); // until SIGTERM or SIGINT
//! ```

#![deny(clippy::print_stderr)]

pub mod access_monitor;
pub mod access_series;
pub mod admin;
pub mod client_list;
pub mod client_memory;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod connection_groups;
pub mod db;
pub mod decoder;
pub mod frame;
pub mod functions;
pub mod handler;
pub mod hints;
pub mod http;
pub mod instance;
pub mod keytable;
pub mod live;
pub mod log;
pub mod metrics;
pub mod parse;
pub mod scan_cursors;
pub mod server;
pub mod server_cache;
pub mod shadow;
pub mod slowlog;
pub mod stamp;
pub mod start_up_pages;
pub mod warmup;

pub use config::{parse_period, Backend, Config, Fsync, WalRecovery};
pub use server::{run, serve, Server};
