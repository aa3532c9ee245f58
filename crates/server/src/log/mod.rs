//! The shared log's server side (CORFU/ZLog, issue 27): the [`storage`] contract each node
//! keeps for the log objects in its slots, and the [`sequencer`]s of the logs whose names hash
//! to its slots. Everything that spans nodes — striping positions over objects, chain
//! replication, recovery after a sequencer's node dies — is the client's (`crates/zlog`), as
//! in CORFU: a node only answers for its own keys. Commands: `cmd::zlog`.

pub mod lease;
pub mod sequencer;
pub mod storage;

/// Default `--log-replicas`: each entry on two nodes, so one node's loss loses nothing.
pub const DEFAULT_REPLICAS: u8 = 2;

/// The most replicas an entry may have.
pub const MAX_REPLICAS: u8 = 5;

/// Objects a log's positions are striped over (position `p` lives in stripe `p % STRIPES`).
/// Fixed for the cluster: a client and every node must agree, and a seal visits
/// `STRIPES * replicas` objects.
pub const STRIPES: u32 = 16;
