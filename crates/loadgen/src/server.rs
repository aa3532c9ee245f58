//! The replay's connections to the server and the counters it reads there (CACHE STATS,
//! POLICY STATUS), with the one-line explanations of what can go wrong on the way.

use super::{LiveOptions, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use anyhow::{anyhow, Result};
use redis::aio::MultiplexedConnection;
use redis::{IntoConnectionInfo, RedisError, Value as Reply};

/// The connections to the server: one multiplexed connection carries the trace's requests,
/// a second one the periodic samples, so samples never queue behind requests.
#[derive(Clone)]
pub(super) struct Server {
    pub(super) address: String,
    pub(super) connection: MultiplexedConnection,
    pub(super) control: MultiplexedConnection,
    /// A cluster's nodes (this one included), each with a connection for its counters;
    /// empty outside a cluster.
    pub(super) nodes: Vec<(String, MultiplexedConnection)>,
}

impl Server {
    pub(super) async fn connect(options: &LiveOptions) -> Result<Server> {
        let address = options.server.clone();
        let password = options.password.as_deref();
        let url = if address.contains("://") {
            address.clone()
        } else {
            format!("redis://{address}")
        };
        url.as_str()
            .into_connection_info()
            .map_err(|e| anyhow!("--server {address}: not HOST:PORT or redis://HOST:PORT ({e})"))?;
        let open = || async {
            open_connection(&address, password)
                .await
                .map_err(|e| connect_error(&address, &e))
        };
        let mut server = Server {
            connection: open().await?,
            control: open().await?,
            address: address.clone(),
            nodes: Vec::new(),
        };
        // The first command says whether the server wants a password and speaks CACHE STATS.
        server.counters().await?;
        // A cluster node: the totals are the whole cluster's (in proxy mode too, where every
        // request lands on this node but is served by its key's owner).
        // A member that cannot be reached (down, its lease not yet lapsed) is left out of
        // the totals: its keys' requests fail and are counted as failures.
        for addr in cluster_addresses(&server).await {
            match open_connection(&addr, password).await {
                Ok(control) => server.nodes.push((addr, control)),
                Err(e) if options.progress => {
                    eprintln!(
                        "replay --server: {}; its counters are left out",
                        connect_error(&addr, &e)
                    )
                }
                Err(_) => {}
            }
        }
        Ok(server)
    }

    /// The cache counters of each cluster node, by address (empty outside a cluster).
    pub(super) async fn node_counters(&self) -> Result<Vec<(String, Counters)>> {
        let mut all = Vec::with_capacity(self.nodes.len());
        for (addr, control) in &self.nodes {
            all.push((addr.clone(), stats_of(addr, control).await?));
        }
        Ok(all)
    }

    /// The server's cache and store counters (CACHE STATS); a cluster's summed over its nodes.
    pub(super) async fn counters(&self) -> Result<Counters> {
        if self.nodes.is_empty() {
            return stats_of(&self.address, &self.control).await;
        }
        let mut total = Counters::default();
        for (_, counters) in self.node_counters().await? {
            total.add(&counters);
        }
        Ok(total)
    }

    /// POLICY STATUS as name/value pairs; empty when the server has no policy commands.
    pub(super) async fn policy_status(&self) -> Result<Vec<(String, Reply)>> {
        match self.query(redis::cmd("POLICY").arg("STATUS")).await {
            Ok(reply) => Ok(pairs(&reply).unwrap_or_default()),
            Err(_) => Ok(Vec::new()),
        }
    }

    pub(super) async fn query(&self, cmd: &redis::Cmd) -> Result<Reply> {
        query_on(&self.address, &self.control, cmd).await
    }
}

async fn query_on(
    address: &str,
    control: &MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<Reply> {
    let mut control = control.clone();
    cmd.query_async::<_, Reply>(&mut control)
        .await
        .map_err(|e| request_error(address, &e))
}

async fn stats_of(address: &str, control: &MultiplexedConnection) -> Result<Counters> {
    let reply = query_on(address, control, redis::cmd("CACHE").arg("STATS")).await?;
    Counters::from_reply(&reply)
        .map_err(|e| anyhow!("{address}: CACHE STATS {e}; is it a mantle server (mantle serve)?"))
}

/// The other nodes' and this one's addresses when `server` is a cluster node with more than one
/// member (`CLUSTER NODES`); empty otherwise.
async fn cluster_addresses(server: &Server) -> Vec<String> {
    let Ok(reply) = server.query(redis::cmd("CLUSTER").arg("NODES")).await else {
        return Vec::new();
    };
    let Some(listing) = text(&reply) else {
        return Vec::new();
    };
    let addrs: Vec<String> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|addr| addr.split('@').next().unwrap_or(addr).to_string())
        .collect();
    if addrs.len() > 1 {
        addrs
    } else {
        Vec::new()
    }
}

/// A multiplexed connection to `address` (HOST:PORT or redis://...), logged in with `password`.
pub(super) async fn open_connection(
    address: &str,
    password: Option<&str>,
) -> redis::RedisResult<MultiplexedConnection> {
    let url = if address.contains("://") {
        address.to_string()
    } else {
        format!("redis://{address}")
    };
    let mut info = url.as_str().into_connection_info()?;
    if let Some(password) = password {
        info.redis.password = Some(password.to_string());
    }
    redis::Client::open(info)?
        .get_multiplexed_tokio_connection_with_response_timeouts(RESPONSE_TIMEOUT, CONNECT_TIMEOUT)
        .await
}

/// A one-line explanation of a failed connection.
pub(super) fn connect_error(address: &str, err: &RedisError) -> anyhow::Error {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        anyhow!("the server at {address} refused the password (--password): {err}")
    } else if err.is_timeout() {
        anyhow!(
            "the server at {address} did not answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        )
    } else if err.is_connection_dropped() || err.to_string().contains("driver unexpectedly") {
        anyhow!("the server at {address} closed the connection at once: is it a Redis-protocol server? ({err})")
    } else {
        anyhow!("cannot reach the server at {address}: {err}")
    }
}

/// A one-line explanation of a failed request.
pub(super) fn request_error(address: &str, err: &RedisError) -> anyhow::Error {
    if err.code() == Some("NOAUTH") {
        anyhow!("the server at {address} requires a password: add --password")
    } else if err.is_timeout() {
        anyhow!(
            "the server at {address} did not answer within {} s",
            RESPONSE_TIMEOUT.as_secs()
        )
    } else if err.is_io_error() || err.is_connection_dropped() {
        anyhow!("lost the connection to the server at {address}: {err}")
    } else {
        anyhow!("{address}: {err}")
    }
}

/// A RESP2 map (a flat array of names and values) as pairs.
pub(super) fn pairs(reply: &Reply) -> Option<Vec<(String, Reply)>> {
    let Reply::Bulk(items) = reply else {
        return None;
    };
    items
        .chunks_exact(2)
        .map(|kv| match &kv[0] {
            Reply::Data(name) => Some((String::from_utf8_lossy(name).into_owned(), kv[1].clone())),
            Reply::Status(name) => Some((name.clone(), kv[1].clone())),
            _ => None,
        })
        .collect()
}

pub(super) fn integer(reply: &Reply) -> Option<u64> {
    match reply {
        Reply::Int(n) => u64::try_from(*n).ok(),
        Reply::Data(text) => std::str::from_utf8(text).ok()?.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Data(text) => Some(String::from_utf8_lossy(text).into_owned()),
        Reply::Status(text) => Some(text.clone()),
        Reply::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The CACHE STATS numbers the report is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Counters {
    pub(super) objects: u64,
    pub(super) bytes: u64,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) evictions: u64,
    pub(super) store_reads: u64,
    pub(super) store_writes: u64,
    pub(super) store_errors: u64,
    /// The server's algorithm and capacity (`None`: not in the reply, or no limit).
    pub(super) algorithm: Option<cache::Algorithm>,
    pub(super) capacity_objects: Option<u64>,
    pub(super) capacity_bytes: Option<u64>,
}

impl Counters {
    pub(super) fn from_reply(reply: &Reply) -> Result<Counters, String> {
        let pairs = pairs(reply).ok_or("did not reply with name/value pairs")?;
        let get = |name: &str| -> Result<u64, String> {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| integer(v))
                .ok_or_else(|| format!("reply lacks the counter `{name}`"))
        };
        Ok(Counters {
            objects: get("objects")?,
            bytes: get("bytes")?,
            hits: get("hits")?,
            misses: get("misses")?,
            evictions: get("evictions")?,
            store_reads: get("store_reads")?,
            store_writes: get("store_writes")?,
            store_errors: get("store_errors")?,
            algorithm: pairs
                .iter()
                .find(|(n, _)| n == "algorithm")
                .and_then(|(_, v)| text(v))
                .and_then(|name| name.parse().ok()),
            // CACHE STATS says 0 for "no limit".
            capacity_objects: get("capacity_objects").ok().filter(|&n| n > 0),
            capacity_bytes: get("capacity_bytes").ok().filter(|&n| n > 0),
        })
    }

    /// The counters' growth since `before` (gauges keep this sample's value). A counter that
    /// went down (CONFIG RESETSTAT during the run) counts from zero.
    pub(super) fn since(&self, before: &Counters) -> Counters {
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        Counters {
            objects: self.objects,
            bytes: self.bytes,
            hits: d(self.hits, before.hits),
            misses: d(self.misses, before.misses),
            evictions: d(self.evictions, before.evictions),
            store_reads: d(self.store_reads, before.store_reads),
            store_writes: d(self.store_writes, before.store_writes),
            store_errors: d(self.store_errors, before.store_errors),
            ..*self
        }
    }

    /// Adds another node's counters (capacities too: the cluster's is the sum).
    pub(super) fn add(&mut self, other: &Counters) {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.objects += other.objects;
        self.bytes += other.bytes;
        self.hits += other.hits;
        self.misses += other.misses;
        self.evictions += other.evictions;
        self.store_reads += other.store_reads;
        self.store_writes += other.store_writes;
        self.store_errors += other.store_errors;
        self.algorithm = self.algorithm.or(other.algorithm);
        self.capacity_objects = sum(self.capacity_objects, other.capacity_objects);
        self.capacity_bytes = sum(self.capacity_bytes, other.capacity_bytes);
    }

    pub(super) fn store_ops(&self) -> u64 {
        self.store_reads + self.store_writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(text: &str) -> Reply {
        Reply::Data(text.as_bytes().to_vec())
    }

    fn cache_stats(hits: i64, misses: i64) -> Reply {
        let mut items = vec![data("algorithm"), data("lru")];
        for (name, value) in [
            ("objects", 10),
            ("capacity_objects", 20),
            ("capacity_bytes", 0),
            ("bytes", 1000),
            ("hits", hits),
            ("misses", misses),
            ("hit_ratio", -1),
            ("evictions", 3),
            ("fills", 2),
            ("store_reads", misses),
            ("store_writes", 7),
            ("store_errors", 0),
        ] {
            items.push(data(name));
            items.push(if name == "hit_ratio" {
                data("0.5000")
            } else {
                Reply::Int(value)
            });
        }
        Reply::Bulk(items)
    }

    #[test]
    fn cache_stats_reply_is_read_by_name() {
        let c = Counters::from_reply(&cache_stats(5, 4)).unwrap();
        assert_eq!((c.objects, c.bytes, c.hits, c.misses), (10, 1000, 5, 4));
        assert_eq!((c.evictions, c.store_reads, c.store_writes), (3, 4, 7));
        assert_eq!(c.algorithm, Some(cache::Algorithm::Lru));
        assert_eq!((c.capacity_objects, c.capacity_bytes), (Some(20), None));
        let err =
            Counters::from_reply(&Reply::Bulk(vec![data("objects"), Reply::Int(1)])).unwrap_err();
        assert!(err.contains("`bytes`"), "{err}");
        assert!(Counters::from_reply(&Reply::Okay).is_err());
    }

    #[test]
    fn deltas_count_growth_and_survive_a_reset() {
        let before = Counters::from_reply(&cache_stats(100, 50)).unwrap();
        let after = Counters::from_reply(&cache_stats(130, 60)).unwrap();
        let d = after.since(&before);
        assert_eq!((d.hits, d.misses, d.objects), (30, 10, 10));
        // CONFIG RESETSTAT between the samples: the later value is all there is.
        let reset = Counters::from_reply(&cache_stats(7, 2)).unwrap();
        assert_eq!(reset.since(&before).hits, 7);
    }
}
