//! `replay --server ADDR --nodes N --tick T`: a trace replayed against a live cluster of
//! `mantle serve --cluster --tick manual` nodes in lock step with the simulator
//! (`replay --nodes N`), so the same balancer can be compared live and simulated, tick by tick.
//!
//! - Every request goes straight to the node owning its key's slot (`CLUSTER NODES`, read
//!   again after every tick and on `MOVED`), one at a time in trace order, so a node counts
//!   exactly the trace requests the simulator gives it: no redirections, and no fill of a
//!   missed key (a live miss is not written back, unlike `replay --server` alone).
//! - Ticks come at the simulator's times (its `NodeClock`, replay's schedule); each is a
//!   `POLICY TICK now` sent to every node at once: every node publishes its measurement,
//!   then decides once all have (the server's lock-step tick, `cluster::balance`).
//! - A lock-step tick answers once the migrations it started are done; the replay then
//!   waits until every node sees the new owners and records which slots changed owner, at
//!   that tick: with `replay --nodes N --migration-rate unlimited` the simulator moves the
//!   same slots at the same ticks.
//!
//! Node `i` of the report is the i-th node by id, the order of `servers[i]`.

use anyhow::{anyhow, bail, Context, Result};
use cluster::exports;
use redis::Value as Reply;
use sim::nodes::{
    ClusterReport, DueTick, MigrationRecord, NodeClock, NodeParts, NodesConfig, NodesTickRow, Parts,
};
use slots::{key_slot, SLOTS};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trace::{Op, Request};

/// Longest a tick's migrations may take before the replay gives up.
const MIGRATION_WAIT: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(30);

struct Node {
    id: String,
    addr: String,
    conn: redis::Connection,
}

fn connect(addr: &str, password: Option<&str>) -> Result<redis::Connection> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("redis://{addr}")
    };
    let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
        .map_err(|e| anyhow!("--server {addr}: not HOST:PORT or redis://HOST:PORT ({e})"))?;
    if let Some(p) = password {
        info.redis.password = Some(p.to_string());
    }
    let client = redis::Client::open(info).map_err(|e| anyhow!("--server {addr}: {e}"))?;
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    Ok(conn)
}

/// One line of `CLUSTER NODES`: id, address, owned ranges.
type Listed = (String, String, Vec<(u16, u16)>);

/// `CLUSTER NODES` of `conn`, by id.
fn cluster_nodes(conn: &mut redis::Connection) -> Result<Vec<Listed>> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(conn)
        .context("CLUSTER NODES (replay --server --nodes needs a cluster node)")?;
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let (Some(id), Some(addr)) = (words.next(), words.next()) else {
            bail!("CLUSTER NODES: unreadable line '{line}'");
        };
        let addr = addr.split('@').next().unwrap_or(addr).to_string();
        let ranges = words
            .skip(6)
            .filter_map(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect();
        nodes.push((id.to_string(), addr, ranges));
    }
    nodes.sort();
    Ok(nodes)
}

/// Owner index of every slot, by `ids`; `None` while a slot is unowned.
fn owners(ids: &[String], listed: &[Listed]) -> Vec<Option<u16>> {
    let mut owner = vec![None; usize::from(SLOTS)];
    for (id, _, ranges) in listed {
        let Some(i) = ids.iter().position(|x| x == id) else {
            continue;
        };
        for &(a, b) in ranges {
            for s in a..=b.min(SLOTS - 1) {
                owner[usize::from(s)] = Some(i as u16);
            }
        }
    }
    owner
}

fn cache_stats(conn: &mut redis::Connection) -> Result<BTreeMap<String, i64>> {
    let reply: Reply = redis::cmd("CACHE").arg("STATS").query(conn)?;
    Ok(super::server::pairs(&reply)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((k, super::server::integer(&v)? as i64)))
        .collect())
}

/// Replays `next`'s requests across the cluster `seed` belongs to; `nodes` must match it.
pub fn replay_cluster(
    seed: &str,
    password: Option<&str>,
    config: &NodesConfig,
    mut next: impl FnMut() -> Result<Option<Request>>,
) -> Result<ClusterReport> {
    let started = Instant::now();
    let mut first = connect(seed, password)?;
    let listed = cluster_nodes(&mut first)?;
    if listed.len() != config.nodes {
        bail!(
            "--nodes {}: the cluster of {seed} has {} node(s)",
            config.nodes,
            listed.len()
        );
    }
    let ids: Vec<String> = listed.iter().map(|n| n.0.clone()).collect();
    let mut nodes: Vec<Node> = Vec::new();
    for (id, addr, _) in &listed {
        nodes.push(Node {
            id: id.clone(),
            addr: addr.clone(),
            conn: connect(addr, password)?,
        });
    }
    let mut owner = owners(&ids, &listed);
    let stats_before: Vec<BTreeMap<String, i64>> = nodes
        .iter_mut()
        .map(|n| cache_stats(&mut n.conn))
        .collect::<Result<_>>()?;

    let n = config.nodes;
    let mut requests_of = vec![0u64; n];
    let mut lookups_of = vec![0u64; n];
    let mut st = Tally {
        counts: vec![0; n],
        load_sum: vec![0.0; n],
        load_peak: vec![0.0; n],
        exported: vec![0; n],
        imported: vec![0; n],
        slot_requests: vec![0; usize::from(SLOTS)],
        imbalances: Vec::new(),
        rows: Vec::new(),
        migrations: Vec::new(),
    };
    let mut digits = itoa::Buffer::new();
    let zeros = vec![0u8; 1 << 20];

    // The simulator's ticks (`sim::nodes::NodeClock`), so both tick at the same times.
    let mut clock = NodeClock::new(config.tick, config.trace_clock);
    let (mut requests, mut first_time, mut last_time) = (0u64, None::<f64>, 0.0);
    while let Some(r) = next()? {
        let due = clock
            .before(r.time)
            .map_err(|e| anyhow!("request {} (time {} s): {e}", requests + 1, r.time))?;
        for &t in due {
            tick(
                t,
                &mut st,
                &mut nodes,
                &ids,
                &mut owner,
                config.record_ticks,
            )?;
        }
        first_time.get_or_insert(r.time);
        last_time = r.time;
        requests += 1;
        let key = digits.format(r.key);
        let slot = key_slot(key.as_bytes());
        st.slot_requests[usize::from(slot)] += 1;
        let mut attempts = 0;
        let target = loop {
            let Some(i) = owner[usize::from(slot)] else {
                bail!("slot {slot} has no owner in the cluster");
            };
            let node = &mut nodes[usize::from(i)];
            let mut cmd = match r.op {
                Op::Get | Op::Access => redis::cmd("GET"),
                Op::Put => redis::cmd("SET"),
                Op::Delete => redis::cmd("DEL"),
            };
            cmd.arg(key.as_bytes());
            if r.op == Op::Put {
                cmd.arg(&zeros[..(r.size as usize).min(zeros.len())]);
            }
            match cmd.query::<Reply>(&mut node.conn) {
                Ok(_) => break usize::from(i),
                Err(e) if e.code() == Some("MOVED") && attempts < 3 => {
                    attempts += 1;
                    let listed = cluster_nodes(&mut node.conn)?;
                    owner = owners(&ids, &listed);
                }
                Err(e) => {
                    return Err(anyhow!(
                        "{} {}: {}: {e}",
                        r.op.name().to_uppercase(),
                        r.key,
                        node.addr
                    ))
                }
            }
        };
        st.counts[target] += 1;
        requests_of[target] += 1;
        if matches!(r.op, Op::Get | Op::Access) {
            lookups_of[target] += 1;
        }
        if let Some(t) = clock.after() {
            tick(
                t,
                &mut st,
                &mut nodes,
                &ids,
                &mut owner,
                config.record_ticks,
            )?;
        }
    }

    let mut parts = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        let after = cache_stats(&mut node.conn)?;
        let delta = |k: &str| {
            (after.get(k).copied().unwrap_or(0) - stats_before[i].get(k).copied().unwrap_or(0))
                .max(0) as u64
        };
        parts.push(NodeParts {
            requests: requests_of[i],
            lookups: lookups_of[i],
            hits: delta("hits"),
            misses: delta("misses"),
            load_sum: st.load_sum[i],
            load_peak: st.load_peak[i],
            cached_objects: after.get("objects").copied().unwrap_or(0).max(0) as u64,
            exported_slots: st.exported[i],
            imported_slots: st.imported[i],
            // The nodes' classes are their own (`serve --classes`); INFO does not list them.
            classes: None,
        });
    }
    let owner: Vec<u16> = owner.iter().map(|o| o.unwrap_or(u16::MAX)).collect();
    Ok(sim::nodes::build_report(Parts {
        config,
        nodes: &parts,
        owner: &owner,
        imbalances: &st.imbalances,
        ticks: clock.ticks(),
        migrations: st.migrations,
        unfinished: Vec::new(),
        rows: st.rows,
        policy: None,
        backend: None,
        duration: first_time.map(|t| last_time - t),
        wall_seconds: started.elapsed().as_secs_f64(),
        requests,
    }))
}

/// What the live replay keeps across ticks.
struct Tally {
    /// Requests each node served since the last tick.
    counts: Vec<u64>,
    load_sum: Vec<f64>,
    load_peak: Vec<f64>,
    exported: Vec<u64>,
    imported: Vec<u64>,
    slot_requests: Vec<u32>,
    imbalances: Vec<f64>,
    rows: Vec<NodesTickRow>,
    migrations: Vec<MigrationRecord>,
}

/// One lock-step tick: every node ticks at `now`, then the slots that changed owner are
/// recorded as this tick's migrations.
fn tick(
    t: DueTick,
    st: &mut Tally,
    nodes: &mut [Node],
    ids: &[String],
    owner: &mut Vec<Option<u16>>,
    record_ticks: bool,
) -> Result<()> {
    let DueTick {
        tick: tick_no, now, ..
    } = t;
    let loads: Vec<f64> = st.counts.iter().map(|&c| t.per_second(c)).collect();
    st.counts.iter_mut().for_each(|c| *c = 0);
    for ((sum, peak), &load) in st.load_sum.iter_mut().zip(&mut st.load_peak).zip(&loads) {
        *sum += load;
        *peak = peak.max(load);
    }
    let mean = loads.iter().sum::<f64>() / st.counts.len() as f64;
    let max = loads.iter().copied().fold(0.0, f64::max);
    let imbalance = if mean > 0.0 { max / mean } else { 1.0 };
    if mean > 0.0 {
        st.imbalances.push(imbalance);
    }

    tick_everyone(nodes, now)?;
    let after = settle(nodes, ids)?;
    // Who gave which slots to whom at this tick.
    let mut moved: BTreeMap<(u16, u16), Vec<u16>> = BTreeMap::new();
    for s in 0..SLOTS {
        if let (Some(a), Some(b)) = (owner[usize::from(s)], after[usize::from(s)]) {
            if a != b {
                moved.entry((a, b)).or_default().push(s);
            }
        }
    }
    for ((from, to), slots) in moved {
        let load = slots
            .iter()
            .map(|&s| t.per_second(u64::from(st.slot_requests[usize::from(s)])))
            .sum();
        st.exported[usize::from(from)] += slots.len() as u64;
        st.imported[usize::from(to)] += slots.len() as u64;
        st.migrations.push(MigrationRecord {
            from: usize::from(from),
            to: usize::from(to),
            ranges: exports::ranges(&slots),
            slots: slots.len() as u64,
            bytes: 0,
            load,
            amount: 0.0,
            start_tick: tick_no,
            start_time: now,
            copy_seconds: 0.0,
            done_tick: Some(tick_no),
        });
    }
    *owner = after;
    if record_ticks {
        st.rows.push(NodesTickRow {
            tick: tick_no,
            time: now,
            loads,
            max_over_mean: imbalance,
            migrations_in_flight: 0,
        });
    }
    st.slot_requests.iter_mut().for_each(|c| *c = 0);
    Ok(())
}

/// `POLICY TICK now` on every node at once (each on its own thread), so each publishes its
/// measurement before any decides.
fn tick_everyone(nodes: &mut [Node], now: f64) -> Result<()> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter_mut()
            .map(|node| {
                s.spawn(move || {
                    redis::cmd("POLICY")
                        .arg("TICK")
                        .arg(now)
                        .query::<Reply>(&mut node.conn)
                        .map_err(|e| {
                            anyhow!(
                                "{} ({}): POLICY TICK {now}: {e}; the nodes need --tick manual",
                                node.addr,
                                node.id
                            )
                        })
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow!("a tick thread panicked"))??;
        }
        Ok(())
    })
}

/// Waits until every node agrees on the owners, and returns them. A lock-step tick returns
/// only once the migrations it started are done, so what is left is the map reaching every
/// node.
fn settle(nodes: &mut [Node], ids: &[String]) -> Result<Vec<Option<u16>>> {
    let deadline = Instant::now() + MIGRATION_WAIT;
    loop {
        let mut views = Vec::new();
        for node in nodes.iter_mut() {
            let listed = cluster_nodes(&mut node.conn)?;
            views.push(owners(ids, &listed));
        }
        if views.windows(2).all(|w| w[0] == w[1]) {
            return Ok(views.swap_remove(0));
        }
        if Instant::now() > deadline {
            bail!("slot migrations did not finish within {MIGRATION_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
