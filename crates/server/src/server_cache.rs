//! The server's cache is `crates/cache`'s [`AnyCache`]: the one cache type, with the class
//! layer of a `--classes FILE` (the same file and rules as `mantle replay --classes`) or
//! without one, chosen once at start-up.
//!
//! Requests are shown to the rules as replay shows them: key rules see the client's key bytes,
//! `size:` the value's length, `op:` `get` for GET and `put` for SET, and `hint:` the class a
//! `SET ... HINT name` gave the object (a GET of that object carries the same hint). Lookups are
//! credited to the class of the request, as replay credits them. Without a class file the plain
//! cache runs exactly as before (its slot hints included): one predictable branch per call.

use cache::classes::{Probe, RuleOp};

pub use cache::{AnyCache as ServerCache, ClassFigures};

/// The server's cache of `algorithm`, its slab packed densely ([`crate::keytable::PACKING`]):
/// every construction goes through here (or [`scripted`]) so the bound that
/// `keytable::metadata_worst` computes holds for whichever cache is live.
pub fn new(
    algorithm: cache::Algorithm,
    capacity: cache::Capacity,
    classes: Option<cache::classes::ClassSet>,
) -> ServerCache {
    packed(ServerCache::new(algorithm, capacity, classes))
}

/// The server's cache under hooks ([`ServerCache::scripted`]), packed as [`new`]'s.
pub fn scripted(
    capacity: cache::Capacity,
    hooks: Box<dyn cache::hooks::ObjectHooks>,
) -> ServerCache {
    packed(ServerCache::scripted(capacity, hooks))
}

fn packed(mut cache: ServerCache) -> ServerCache {
    cache.set_packing(crate::keytable::PACKING);
    cache
}

/// What a request looks like to the class rules.
pub struct Request<'a> {
    pub key: &'a [u8],
    pub size: usize,
    pub op: RuleOp,
    pub hint: Option<&'a [u8]>,
}

/// The request as the class rules read it (no offsets in a key-value server).
impl<'a> From<&Request<'a>> for Probe<'a> {
    #[inline]
    fn from(r: &Request<'a>) -> Probe<'a> {
        Probe {
            key: r.key,
            size: r.size.min(u32::MAX as usize) as u32,
            offset: 0,
            op: r.op,
            hint: r.hint,
        }
    }
}
