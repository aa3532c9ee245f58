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
    ("maxmemory-policy", false),
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
        "maxmemory-policy" => snapshot.algorithm.name().to_string(),
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

/// Validates every pair first, then applies them all: all or nothing, as in Redis 7. A
/// capacity is recorded first (`live::baseline`: it outlives restarts and is what a rollback
/// to no management restores), so one that cannot be recorded is not applied either.
async fn set_all(instance: &Instance, pairs: &[(Bytes, Bytes)]) -> Result<(), String> {
    let mut capacity = instance.live.baseline.get();
    let mut bulk_len = None;
    let mut clients_limit = None;
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
        let number = units::parse_bytes(&value).map_err(|e| fail(&e))?;
        match name.as_str() {
            "maxmemory" => {
                capacity.bytes = cache::capacity::limit(number, &name).map_err(|e| fail(&e))?
            }
            "max-keys" => {
                capacity.objects = cache::capacity::limit(number, &name).map_err(|e| fail(&e))?
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
    if capacity != baseline.get() {
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
    if capacity != instance.db.cache_snapshot().capacity {
        instance.db.set_capacity(capacity);
    }
    if let Some(n) = bulk_len {
        instance.proto_max_bulk_len.store(n, Ordering::Relaxed);
    }
    if let Some(n) = clients_limit {
        instance.client_memory.set_limit(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
