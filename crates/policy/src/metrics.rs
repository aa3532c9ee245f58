//! The per-server metrics a policy sees in `servers[i]`. Defined here rather than taken from
//! the cache crate so the engine serves replay, the server and the CLI's JSON alike.

use serde::{Deserialize, Serialize};

/// Metrics of one cache server at a tick. Counters are totals since start; rates are per
/// second over the last tick. Missing JSON fields default to zero (capacity: unlimited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Metrics {
    /// Objects cached now.
    pub cachesize: f64,
    /// Bytes cached now.
    pub cachebytes: f64,
    /// Target capacity in objects; `f64::INFINITY` (JSON `null`) when unlimited.
    #[serde(with = "capacity_json")]
    pub capacity: f64,
    pub hits: f64,
    pub misses: f64,
    pub gets: f64,
    pub puts: f64,
    pub reqrate: f64,
    pub getrate: f64,
    pub putrate: f64,
    pub missrate: f64,
    pub hitrate: f64,
    /// Requests per second reaching the back-end store.
    pub backend_rate: f64,
    /// Requests waiting at the back-end store.
    pub backend_queue: f64,
    /// Objects evicted so far.
    pub evictions: f64,
    /// This server's load as the host measures it (replay: request rate). Replaced by the
    /// policy's `load()` result for `whoami` when the policy defines one.
    pub load: f64,
    /// CPU utilisation (0..1), serve mode only.
    pub cpu: Option<f64>,
    /// Resident memory in bytes, serve mode only.
    pub mem: Option<f64>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            cachesize: 0.0,
            cachebytes: 0.0,
            capacity: f64::INFINITY,
            hits: 0.0,
            misses: 0.0,
            gets: 0.0,
            puts: 0.0,
            reqrate: 0.0,
            getrate: 0.0,
            putrate: 0.0,
            missrate: 0.0,
            hitrate: 0.0,
            backend_rate: 0.0,
            backend_queue: 0.0,
            evictions: 0.0,
            load: 0.0,
            cpu: None,
            mem: None,
        }
    }
}

mod capacity_json {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_capacity_null_means_unlimited_and_unknown_fields_are_rejected() {
        let m: Metrics = serde_json::from_str(r#"{"cachesize": 5, "capacity": null}"#).unwrap();
        assert_eq!(m.cachesize, 5.0);
        assert!(m.capacity.is_infinite());
        let m: Metrics = serde_json::from_str(r#"{"capacity": 10}"#).unwrap();
        assert_eq!(m.capacity, 10.0);
        let err = serde_json::from_str::<Metrics>(r#"{"cachesise": 5}"#).unwrap_err();
        assert!(err.to_string().contains("cachesise"));
    }
}
