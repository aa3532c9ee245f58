//! Node identities and what a node announces about itself when it joins.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest node id accepted: ids appear in etcd keys, logs and `CLUSTER NODES` lines.
pub const MAX_NODE_ID: usize = 64;

/// A node's name within its cluster: 1 to 64 bytes of ASCII letters, digits, `-` and `_`, so
/// it is safe inside an etcd key and a Redis reply line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(String);

impl NodeId {
    pub fn new(id: &str) -> Result<NodeId, String> {
        let ok = !id.is_empty()
            && id.len() <= MAX_NODE_ID
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(NodeId(id.to_string()))
        } else {
            Err(format!(
                "bad node id {id:?}: expected 1 to {MAX_NODE_ID} letters, digits, '-' or '_'"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for NodeId {
    type Error = String;
    fn try_from(s: String) -> Result<NodeId, String> {
        NodeId::new(&s)
    }
}

impl From<NodeId> for String {
    fn from(id: NodeId) -> String {
        id.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A live member as its membership record in etcd says: present while its lease is kept alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: NodeId,
    /// Where clients reach it (`host:port`), as `-MOVED` replies will name it.
    pub addr: String,
    /// When it joined, in milliseconds since the Unix epoch.
    pub joined_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(NodeId::new("node-1_a").is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65)] {
            assert!(NodeId::new(bad).is_err(), "{bad:?}");
        }
        let err = serde_json::from_str::<NodeId>("\"a/b\"").unwrap_err();
        assert!(err.to_string().contains("bad node id"), "{err}");
    }
}
