//! What the functions thread has installed, published for the connections: `FUNCTION LIST`,
//! `STATS`, `DUMP` and the lookup of a function's flags answer from here without waiting for
//! a function that is running.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    /// Redis's flag names (`no-writes`, `allow-oom`, ...), as given.
    pub flags: Vec<String>,
}

impl FunctionInfo {
    pub fn no_writes(&self) -> bool {
        self.flags.iter().any(|f| f == "no-writes")
    }
}

/// The flags `redis.register_function` accepts (Redis 7's); only `no-writes` changes what a
/// function may do here, the others are kept and listed.
pub const KNOWN_FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryInfo {
    pub name: String,
    pub version: u32,
    pub code: String,
    pub loaded_at_ms: u64,
    pub functions: Vec<FunctionInfo>,
}

#[derive(Default)]
pub struct Catalog {
    pub libraries: BTreeMap<String, LibraryInfo>,
    /// Function name → its library.
    pub functions: HashMap<String, String>,
    /// The registry revision the installed libraries reflect.
    pub revision: i64,
    /// SHA-1 (lowercase hex) of every cached script.
    pub scripts: std::collections::HashSet<String>,
}

impl Catalog {
    pub fn function(&self, name: &str) -> Option<(&LibraryInfo, &FunctionInfo)> {
        let library = self.libraries.get(self.functions.get(name)?)?;
        let function = library.functions.iter().find(|f| f.name == name)?;
        Some((library, function))
    }
}

/// The function or script running now (`FUNCTION STATS`, `FUNCTION KILL`).
pub struct Running {
    pub name: String,
    /// The command that started it, for STATS (`fcall`, `eval`, ...) with its arguments.
    pub command: Vec<Bytes>,
    pub started: Instant,
    /// Whether it has written: Redis refuses to kill such a function (its writes would be
    /// half done).
    pub wrote: Arc<AtomicBool>,
}
