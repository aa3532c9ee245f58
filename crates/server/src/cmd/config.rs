//! CONFIG GET pattern... / CONFIG SET name value... / CONFIG RESETSTAT. The parameters are
//! the cache's own settings (capacity, algorithm, limits) plus the few read-only ones that
//! tools such as redis-benchmark ask for at start-up (`save`, `appendonly`).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::config::Backend;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use cache::glob::glob_match;
use std::sync::atomic::Ordering;

pub enum ConfigCmd {
    Get(Vec<Bytes>),
    Set(Vec<(Bytes, Bytes)>),
    ResetStat,
}

/// Every parameter CONFIG knows, in the order CONFIG GET * lists them.
const PARAMETERS: &[(&str, bool)] = &[
    // (name, settable)
    ("maxmemory", true),
    ("max-keys", true),
    ("proto-max-bulk-len", true),
    ("maxmemory-clients", true),
    ("maxmemory-policy", true),
    ("slowlog-log-slower-than", true),
    ("slowlog-max-len", true),
    ("latency-monitor-threshold", true),
    ("maxclients", false),
    ("appendonly", false),
    ("appendfsync", false),
    ("save", false),
    ("databases", false),
    ("bind", false),
    ("port", false),
    ("timeout", false),
];

/// Smallest `proto-max-bulk-len` accepted, as in Redis.
const MIN_BULK_LEN: u64 = 1024 * 1024;

impl Declared<'_> for ConfigCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "config",
        arity: -2,
        flags: Flags::ADMIN
            .with(Flags::NOSCRIPT)
            .with(Flags::LOADING)
            .with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<ConfigCmd, ParseError> {
        let sub = parse.next_bytes()?;
        match sub.to_ascii_lowercase().as_slice() {
            b"get" => {
                let patterns = parse.rest();
                if patterns.is_empty() {
                    return Err(ParseError::Other(
                        "wrong number of arguments for 'config|get' command".into(),
                    ));
                }
                Ok(ConfigCmd::Get(patterns.to_vec()))
            }
            b"set" => {
                let rest = parse.rest();
                if rest.is_empty() || rest.len() % 2 == 1 {
                    return Err(ParseError::Other(
                        "wrong number of arguments for 'config|set' command".into(),
                    ));
                }
                Ok(ConfigCmd::Set(
                    rest.chunks_exact(2)
                        .map(|p| (p[0].clone(), p[1].clone()))
                        .collect(),
                ))
            }
            b"resetstat" => {
                parse.finish()?;
                Ok(ConfigCmd::ResetStat)
            }
            _ => Err(ParseError::Other(format!(
                "unknown subcommand '{}'. Try CONFIG HELP.",
                super::printable(&sub, 64)
            ))),
        }
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match self {
            ConfigCmd::Get(patterns) => {
                let mut pairs = Vec::new();
                for &(name, _) in PARAMETERS {
                    if patterns
                        .iter()
                        .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                    {
                        pairs.push((
                            Frame::static_bulk(name),
                            Frame::bulk_str(&get(instance, name)),
                        ));
                    }
                }
                Frame::Map(pairs)
            }
            ConfigCmd::Set(pairs) => match set_all(instance, &pairs).await {
                Ok(()) => Frame::ok(),
                Err(message) => Frame::err(message),
            },
            ConfigCmd::ResetStat => {
                instance.db.stats().reset();
                instance.db.metrics().commands.reset();
                Frame::ok()
            }
        }
    }
}

fn get(instance: &Instance, name: &str) -> String {
    let snapshot = instance.db.cache_snapshot();
    match name {
        "maxmemory" => snapshot.capacity.bytes.unwrap_or(0).to_string(),
        "max-keys" => snapshot.capacity.objects.unwrap_or(0).to_string(),
        "proto-max-bulk-len" => instance.max_bulk_len().to_string(),
        "maxmemory-clients" => instance.client_memory.limit().to_string(),
        "maxmemory-policy" => policy_name(snapshot.algorithm).to_string(),
        "slowlog-log-slower-than" => instance.slowlog.slower_than_us().to_string(),
        "slowlog-max-len" => instance.slowlog.max_len().to_string(),
        "latency-monitor-threshold" => instance
            .db
            .metrics()
            .commands
            .monitor_threshold_ms
            .load(Ordering::Relaxed)
            .to_string(),
        "maxclients" => instance.config.maxclients.to_string(),
        "appendonly" => match instance.config.backend {
            Backend::RocksDb { .. } => "yes".into(),
            Backend::Upstream { .. } => "no".into(),
        },
        "appendfsync" => match &instance.config.backend {
            Backend::RocksDb { fsync, .. } => fsync.as_str().into(),
            Backend::Upstream { .. } => "no".into(),
        },
        "save" => String::new(),
        "databases" => "1".into(),
        "bind" => instance.local_addr.ip().to_string(),
        "port" => instance.local_addr.port().to_string(),
        "timeout" => "0".into(),
        _ => String::new(),
    }
}

/// `maxmemory-policy` as Redis names it: LRU is Redis's `allkeys-lru`; Mantle's other
/// algorithms have no Redis name and keep their own.
pub fn policy_name(algorithm: cache::Algorithm) -> &'static str {
    match algorithm {
        cache::Algorithm::Lru => "allkeys-lru",
        other => other.name(),
    }
}

/// The algorithm a `CONFIG SET maxmemory-policy` value names: Redis's `allkeys-lru` or one of
/// Mantle's algorithm names. Redis's other policies have no equivalent here (the store keeps
/// every key, so `noeviction` and the `volatile-*` ones do not apply; `allkeys-lfu` and
/// `allkeys-random` are Redis's approximations, not Mantle's `lfu` and `random`, which are
/// named directly) and are refused, naming what is accepted.
fn parse_policy(value: &str) -> Result<cache::Algorithm, String> {
    let value = value.to_ascii_lowercase();
    if value == "allkeys-lru" {
        return Ok(cache::Algorithm::Lru);
    }
    // Offline algorithms need each request's next access, which a server cannot know.
    let online = |a: &cache::Algorithm| !a.is_offline();
    value
        .parse::<cache::Algorithm>()
        .ok()
        .filter(online)
        .ok_or_else(|| {
            let mut accepted = vec!["allkeys-lru"];
            accepted.extend(
                cache::Algorithm::ALL
                    .iter()
                    .filter(|a| online(a))
                    .map(|a| a.name()),
            );
            format!(
                "'{value}' has no equivalent in Mantle; accepted: {}",
                accepted.join(", ")
            )
        })
}

/// Validates every pair first, then applies them all: all or nothing, as in Redis 7. A
/// capacity is recorded first (`live::baseline`: it outlives restarts and is what a rollback
/// to no management restores), so one that cannot be recorded is not applied either.
async fn set_all(instance: &Instance, pairs: &[(Bytes, Bytes)]) -> Result<(), String> {
    let mut capacity = instance.live.baseline.get();
    // Only a pair that names a capacity touches it: a policy may be running the cache at a
    // size of its own, which `CONFIG SET slowlog-max-len 10` must leave alone.
    let mut capacity_named = false;
    let mut bulk_len = None;
    let mut clients_limit = None;
    let mut algorithm = None;
    let mut slower_than = None;
    let mut slowlog_len = None;
    let mut monitor_threshold = None;
    let mut seen: Vec<String> = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let value = String::from_utf8_lossy(value);
        let fail = |why: &str| {
            format!("CONFIG SET failed (possibly related to argument '{name}') - {why}")
        };
        match PARAMETERS.iter().find(|(n, _)| *n == name) {
            None => {
                return Err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{name}'"
                ))
            }
            Some((_, false)) => return Err(fail("can't set immutable config")),
            Some(_) => {}
        }
        // As Redis: one value per parameter, so the outcome never depends on the order.
        if seen.contains(&name) {
            return Err(fail("duplicate parameter"));
        }
        let integer = |min: i64, max: i64| match value.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(fail(&format!("argument must be between {min} and {max}"))),
        };
        match name.as_str() {
            "maxmemory-policy" => {
                algorithm = Some(parse_policy(&value).map_err(|e| fail(&e))?);
                seen.push(name);
                continue;
            }
            "slowlog-log-slower-than" => {
                slower_than = Some(integer(-1, i64::MAX)?);
                seen.push(name);
                continue;
            }
            "slowlog-max-len" => {
                slowlog_len = Some(integer(0, crate::slowlog::MAX_LEN_LIMIT as i64)? as u64);
                seen.push(name);
                continue;
            }
            "latency-monitor-threshold" => {
                monitor_threshold = Some(integer(0, i64::MAX)? as u64);
                seen.push(name);
                continue;
            }
            _ => {}
        }
        let number = units::parse_bytes(&value).map_err(|e| fail(&e))?;
        match name.as_str() {
            "maxmemory" => {
                capacity.bytes = cache::capacity::limit(number, &name).map_err(|e| fail(&e))?;
                capacity_named = true;
            }
            "max-keys" => {
                capacity.objects = cache::capacity::limit(number, &name).map_err(|e| fail(&e))?;
                capacity_named = true;
            }
            "maxmemory-clients" => clients_limit = Some(number),
            _ => {
                if !(MIN_BULK_LEN..=crate::config::MAX_BULK_LEN_LIMIT).contains(&number) {
                    return Err(fail("argument must be between 1048576 and 4294967295"));
                }
                bulk_len = Some(number);
            }
        }
        seen.push(name);
    }
    let baseline = instance.live.baseline.clone();
    if capacity_named && capacity != baseline.get() {
        let recorded = tokio::task::spawn_blocking(move || baseline.set(capacity)).await;
        match recorded {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(format!(
                    "CONFIG SET failed - cannot record the capacity: {e}"
                ))
            }
            Err(_) => {
                return Err("CONFIG SET failed - recording the capacity was interrupted".into())
            }
        }
    }
    if capacity_named && capacity != instance.db.cache_snapshot().capacity {
        instance.db.set_capacity(capacity);
    }
    if let Some(n) = bulk_len {
        instance.proto_max_bulk_len.store(n, Ordering::Relaxed);
    }
    if let Some(n) = clients_limit {
        instance.client_memory.set_limit(n);
    }
    if let Some(algorithm) = algorithm {
        instance.db.set_algorithm(algorithm);
    }
    if let Some(us) = slower_than {
        instance.slowlog.set_slower_than_us(us);
    }
    if let Some(len) = slowlog_len {
        instance.slowlog.set_max_len(len);
    }
    if let Some(ms) = monitor_threshold {
        instance
            .db
            .metrics()
            .commands
            .monitor_threshold_ms
            .store(ms, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_map_to_algorithms_and_others_are_refused_naming_the_accepted() {
        assert_eq!(parse_policy("allkeys-lru"), Ok(cache::Algorithm::Lru));
        assert_eq!(parse_policy("ALLKEYS-LRU"), Ok(cache::Algorithm::Lru));
        assert_eq!(parse_policy("s3fifo"), Ok(cache::Algorithm::S3Fifo));
        assert_eq!(policy_name(cache::Algorithm::Lru), "allkeys-lru");
        assert_eq!(policy_name(cache::Algorithm::Sieve), "sieve");
        for refused in [
            "allkeys-random",
            "allkeys-lfu",
            "noeviction",
            "volatile-lru",
            "belady",
        ] {
            let error = parse_policy(refused).unwrap_err();
            assert!(
                error.contains("accepted: allkeys-lru, lru, fifo, clock, sieve, s3fifo"),
                "{error}"
            );
        }
    }

    #[test]
    fn globs_match_like_redis_for_star_and_question_mark() {
        assert!(glob_match(b"*", b"maxmemory"));
        assert!(glob_match(b"max*", b"maxmemory"));
        assert!(glob_match(b"*memory*", b"maxmemory-policy"));
        assert!(glob_match(b"save", b"save"));
        assert!(glob_match(b"s?ve", b"save"));
        assert!(!glob_match(b"max", b"maxmemory"));
        assert!(!glob_match(b"*x", b"maxmemory"));
        assert!(glob_match(b"", b""));
    }
}
