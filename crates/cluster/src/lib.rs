//! The Mantle cluster's control plane (DESIGN §8): several `mantle serve` nodes share a key
//! space of 16,384 Redis Cluster slots, and etcd holds who is alive and who owns which
//! slots. This crate is the part every node and the `mantle cluster` command share:
//!
//! - key slots themselves (CRC16 with hash tags, as Redis Cluster) live in the `slots` crate,
//!   re-exported here, so readers and the store can use them without the control plane;
//! - [`slotmap`]: the versioned slot map and its invariants (one owner per slot, migrations
//!   only of owned ranges);
//! - [`control`]: membership under kept-alive leases, the slot map changed only by
//!   compare-and-swap transactions, and a watch that keeps a node's view current through
//!   etcd outages;
//! - [`exports`]: which slots an overloaded node sends away (Ceph's 80–120% rule);
//! - [`board`]: every node's per-tick metrics, for the balancing policy;
//! - [`registry_store`] and [`central_log`]: the policy registry and the central log every
//!   node shares;
//! - [`function_store`]: the function libraries every node runs (`FUNCTION LOAD`);
//! - [`successor`]: which live node runs a dead node's shared-log sequencers before its
//!   slots are reassigned, and [`expiry`]: proving a dead member's lease ran out before etcd
//!   gets round to deleting its record.

#[cfg(feature = "etcd")]
pub mod admin;
#[cfg(feature = "etcd")]
pub mod board;
#[cfg(feature = "etcd")]
pub mod central_log;
#[cfg(feature = "etcd")]
pub mod control;
#[cfg(feature = "etcd")]
pub mod expiry;
pub mod exports;
#[cfg(feature = "etcd")]
pub mod failover;
#[cfg(feature = "etcd")]
pub mod function_store;
pub mod lease;
pub mod node;
#[cfg(feature = "etcd")]
pub mod registry_store;
pub mod slotmap;
pub mod successor;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "etcd")]
pub use central_log::{CentralLog, Level, LogEntry, LogKind, LogQueue};
#[cfg(feature = "etcd")]
pub use control::{
    ClusterConfig, ClusterError, ClusterView, ClusterWatch, ControlPlane, Membership,
    MembershipState, Versioned,
};
#[cfg(feature = "etcd")]
pub use function_store::{FunctionSnapshot, FunctionStore};
pub use lease::LeaseClock;
pub use node::{Member, NodeId};
#[cfg(feature = "etcd")]
pub use registry_store::{PolicyStore, PolicyWatch, RegistryState, SwapRefused};
pub use slotmap::{MapError, Migration, OwnerTable, SlotMap};
