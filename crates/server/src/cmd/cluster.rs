//! CLUSTER SLOTS|SHARDS|NODES|MYID|INFO|KEYSLOT|COUNTKEYSINSLOT|GETKEYSINSLOT, in the shapes
//! Redis Cluster clients parse (`redis-cli -c`, `redis-benchmark --cluster`, the `redis`
//! crate, redis-py), the no-op ASKING, READONLY and READWRITE those clients send, and
//! CLUSTER IMPORT, which only a migration's source sends (`crate::cluster::import`), and
//! CLUSTER FORWARDED, which a proxy-mode node sends first on its connections to the others
//! (requests on such a connection are never forwarded again, `crate::cluster::proxy`).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::cluster::{ClusterNode, Routing};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use cluster::NodeId;
use slots::{key_slot, SlotRange, SLOTS};
use std::fmt::Write;
use store::{SlotData, Storage};

pub enum ClusterCmd {
    Slots,
    Shards,
    Nodes,
    MyId,
    Info,
    KeySlot(Bytes),
    CountKeysInSlot(u16),
    GetKeysInSlot(u16, usize),
    Import(Import),
    /// Marks the connection as another node's forwarding link (answered in `cmd::apply`,
    /// which holds the session).
    Forwarded,
}

/// The target's side of a migration.
pub enum Import {
    Begin(SlotRange, NodeId),
    Put(Bytes, u64, Bytes),
    Del(Bytes),
    /// Many records in one store write (what the source sends).
    Puts(Vec<(Bytes, store::Record)>),
    Dels(Vec<Bytes>),
    Done(SlotRange),
}

fn slot_arg(parse: &mut Parse<'_>) -> Result<u16, ParseError> {
    let slot = parse.next_int()?;
    u16::try_from(slot)
        .ok()
        .filter(|s| *s < SLOTS)
        .ok_or_else(|| ParseError::Other("Invalid or out of range slot".into()))
}

fn range_args(parse: &mut Parse<'_>) -> Result<SlotRange, ParseError> {
    let (start, end) = (slot_arg(parse)?, slot_arg(parse)?);
    SlotRange::new(start, end).ok_or_else(|| ParseError::Other("bad slot range".into()))
}

impl Declared<'_> for ClusterCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "cluster",
        arity: -2,
        flags: Flags::LOADING.with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<ClusterCmd, ParseError> {
        let sub = parse.next_string()?.to_ascii_uppercase();
        let cmd = match sub.as_str() {
            "SLOTS" => ClusterCmd::Slots,
            "SHARDS" => ClusterCmd::Shards,
            "NODES" => ClusterCmd::Nodes,
            "MYID" => ClusterCmd::MyId,
            "INFO" => ClusterCmd::Info,
            "KEYSLOT" => ClusterCmd::KeySlot(parse.next_bytes()?),
            "COUNTKEYSINSLOT" => ClusterCmd::CountKeysInSlot(slot_arg(parse)?),
            "GETKEYSINSLOT" => {
                let slot = slot_arg(parse)?;
                let count = usize::try_from(parse.next_int()?).map_err(|_| {
                    ParseError::Other("Invalid number of keys".into())
                })?;
                ClusterCmd::GetKeysInSlot(slot, count)
            }
            "IMPORT" => {
                let step = parse.next_string()?.to_ascii_uppercase();
                ClusterCmd::Import(match step.as_str() {
                    "BEGIN" => {
                        let range = range_args(parse)?;
                        let from = NodeId::new(&parse.next_string()?)
                            .map_err(|e| ParseError::Other(e.to_string()))?;
                        Import::Begin(range, from)
                    }
                    "PUT" => {
                        let key = parse.next_bytes()?;
                        let expires = u64::try_from(parse.next_int()?)
                            .map_err(|_| ParseError::Other("bad expiry".into()))?;
                        Import::Put(key, expires, parse.next_bytes()?)
                    }
                    "DEL" => Import::Del(parse.next_bytes()?),
                    "PUTS" => {
                        let mut records = Vec::with_capacity(parse.remaining() / 3);
                        while parse.remaining() > 0 {
                            let key = parse.next_bytes()?;
                            let expires_at_ms = u64::try_from(parse.next_int()?)
                                .map_err(|_| ParseError::Other("bad expiry".into()))?;
                            let value = parse.next_bytes()?;
                            records.push((
                                key,
                                store::Record {
                                    value,
                                    expires_at_ms,
                                },
                            ));
                        }
                        Import::Puts(records)
                    }
                    "DELS" => {
                        let mut keys = Vec::with_capacity(parse.remaining());
                        while parse.remaining() > 0 {
                            keys.push(parse.next_bytes()?);
                        }
                        Import::Dels(keys)
                    }
                    "DONE" => {
                        let range = range_args(parse)?;
                        parse.next_int()?; // the map's epoch, for the log
                        Import::Done(range)
                    }
                    other => {
                        return Err(ParseError::Other(format!(
                            "unknown IMPORT step '{other}'"
                        )))
                    }
                })
            }
            "FORWARDED" => ClusterCmd::Forwarded,
            other => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{other}'. Try SLOTS, SHARDS, NODES, MYID, INFO, KEYSLOT, COUNTKEYSINSLOT or GETKEYSINSLOT."
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    /// Whether it writes to the store (the reply then waits for durability).
    fn writes(&self) -> bool {
        matches!(self, ClusterCmd::Import(_))
    }

    // Boxed: its future is much larger than the common commands' (which share the enum's).
    fn apply(
        self,
        instance: &Instance,
        session: &mut Session,
    ) -> impl std::future::Future<Output = Frame> + Send {
        // A proxy link says so once: what it forwards is never forwarded again.
        if matches!(self, ClusterCmd::Forwarded) {
            session.forwarded = true;
        }
        Box::pin(self.run(instance))
    }
}

impl ClusterCmd {
    async fn run(self, instance: &Instance) -> Frame {
        match &self {
            ClusterCmd::KeySlot(key) => return Frame::Integer(i64::from(key_slot(key))),
            ClusterCmd::CountKeysInSlot(slot) => return count_keys(instance, *slot),
            ClusterCmd::GetKeysInSlot(slot, count) => return get_keys(instance, *slot, *count),
            ClusterCmd::Forwarded => return Frame::ok(),
            _ => {}
        }
        let Some(node) = instance.cluster.as_deref() else {
            return Frame::err("This instance has cluster support disabled");
        };
        if let ClusterCmd::Import(step) = self {
            let done = match step {
                Import::Begin(range, from) => node.import_begin(range, &from).await,
                Import::Put(key, expires, value) => node.import_put(&key, expires, &value).await,
                Import::Del(key) => node.import_del(&key).await,
                Import::Puts(records) => node.import_puts(&records).await,
                Import::Dels(keys) => node.import_dels(&keys).await,
                Import::Done(range) => node.import_done(range).await,
            };
            return done.map_or_else(|e| e, |()| Frame::ok());
        }
        let routing = node.routing();
        match self {
            ClusterCmd::Slots => slots(&routing),
            ClusterCmd::Shards => shards(&routing),
            ClusterCmd::Nodes => Frame::Verbatim(Bytes::from(nodes(node, &routing))),
            ClusterCmd::MyId => Frame::bulk_str(node.id.as_str()),
            ClusterCmd::Info => Frame::Verbatim(Bytes::from(info(node, &routing))),
            ClusterCmd::KeySlot(_)
            | ClusterCmd::CountKeysInSlot(_)
            | ClusterCmd::GetKeysInSlot(..)
            | ClusterCmd::Import(_)
            | ClusterCmd::Forwarded => unreachable!("answered above"),
        }
    }
}

fn slot_data(instance: &Instance) -> Result<&dyn SlotData, Frame> {
    instance.db.store().slot_data().ok_or_else(|| {
        Frame::err("keys are not counted per slot in front of an upstream (they live there)")
    })
}

/// Keys this node stores in `slot` (Redis counts its own keys, whoever owns the slot).
fn count_keys(instance: &Instance, slot: u16) -> Frame {
    match slot_data(instance).map(|r| r.count_in_slot(slot)) {
        Ok(Ok(n)) => Frame::Integer(n as i64),
        Ok(Err(e)) => crate::frame::store_error(e),
        Err(frame) => frame,
    }
}

fn get_keys(instance: &Instance, slot: u16, count: usize) -> Frame {
    match slot_data(instance).map(|r| r.keys_in_slot(slot, count)) {
        Ok(Ok(keys)) => Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
        Ok(Err(e)) => crate::frame::store_error(e),
        Err(frame) => frame,
    }
}

/// `host:port` of a member split for replies that want them apart.
fn host_port(addr: &str) -> (&str, i64) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().unwrap_or(0)),
        None => (addr, 0),
    }
}

/// Each owner's ranges with its address, in slot order; owners that are not live members
/// have no address.
fn owned_ranges(routing: &Routing) -> Vec<(SlotRange, &NodeId, Option<&str>)> {
    let mut out = Vec::new();
    if let Some(map) = &routing.view.slot_map {
        for (node, ranges) in &map.value.owners {
            let addr = routing.view.members.get(node).map(|m| m.addr.as_str());
            out.extend(ranges.iter().map(|r| (*r, node, addr)));
        }
    }
    out.sort_by_key(|(r, _, _)| *r);
    out
}

fn slots(routing: &Routing) -> Frame {
    let entries = owned_ranges(routing)
        .into_iter()
        // A client cannot reach a dead owner; leaving its ranges out makes clients ask again.
        .filter_map(|(range, node, addr)| {
            let (host, port) = host_port(addr?);
            Some(Frame::Array(vec![
                Frame::Integer(i64::from(range.start)),
                Frame::Integer(i64::from(range.end)),
                Frame::Array(vec![
                    Frame::bulk_str(host),
                    Frame::Integer(port),
                    Frame::bulk_str(node.as_str()),
                ]),
            ]))
        })
        .collect();
    Frame::Array(entries)
}

fn shards(routing: &Routing) -> Frame {
    let Some(map) = &routing.view.slot_map else {
        return Frame::Array(Vec::new());
    };
    let shards = map
        .value
        .owners
        .iter()
        .map(|(node, ranges)| {
            let bounds = ranges
                .iter()
                .flat_map(|r| [i64::from(r.start), i64::from(r.end)])
                .map(Frame::Integer)
                .collect();
            let member = routing.view.members.get(node);
            let (host, port) = member.map_or(("", 0), |m| host_port(&m.addr));
            let health = if member.is_some() { "online" } else { "failed" };
            let entry = Frame::Map(vec![
                (Frame::static_bulk("id"), Frame::bulk_str(node.as_str())),
                (Frame::static_bulk("port"), Frame::Integer(port)),
                (Frame::static_bulk("ip"), Frame::bulk_str(host)),
                (Frame::static_bulk("endpoint"), Frame::bulk_str(host)),
                (Frame::static_bulk("role"), Frame::static_bulk("master")),
                (Frame::static_bulk("replication-offset"), Frame::Integer(0)),
                (Frame::static_bulk("health"), Frame::bulk_str(health)),
            ]);
            Frame::Map(vec![
                (Frame::static_bulk("slots"), Frame::Array(bounds)),
                (Frame::static_bulk("nodes"), Frame::Array(vec![entry])),
            ])
        })
        .collect();
    Frame::Array(shards)
}

fn nodes(me: &ClusterNode, routing: &Routing) -> String {
    let epoch = routing.view.slot_map.as_ref().map_or(0, |m| m.value.epoch);
    let mut ids: Vec<&NodeId> = routing.view.members.keys().collect();
    if let Some(map) = &routing.view.slot_map {
        ids.extend(map.value.owners.keys());
    }
    ids.sort();
    ids.dedup();
    let mut out = String::new();
    for id in ids {
        let member = routing.view.members.get(id);
        let addr = member.map_or(":0", |m| m.addr.as_str());
        let (_, port) = host_port(addr);
        let mut flags = String::new();
        if *id == me.id {
            flags.push_str("myself,");
        }
        flags.push_str("master");
        if member.is_none() {
            flags.push_str(",fail");
        }
        let link = if member.is_some() {
            "connected"
        } else {
            "disconnected"
        };
        let _ = write!(
            out,
            "{id} {addr}@{} {flags} - 0 0 {epoch} {link}",
            port + 10_000
        );
        if let Some(ranges) = routing
            .view
            .slot_map
            .as_ref()
            .and_then(|m| m.value.owners.get(id))
        {
            for r in ranges {
                let _ = write!(out, " {r}");
            }
        }
        out.push('\n');
    }
    out
}

/// `cluster_state:ok` when every slot has a live owner and this node may answer for its
/// own: an etcd outage alone does not fail the cluster (the last map is served), but a
/// cache-tier node that cannot confirm its lease does (`cluster_lease_confirmed:0`).
fn info(node: &ClusterNode, routing: &Routing) -> String {
    let assigned: usize = routing.view.slot_map.as_ref().map_or(0, |m| {
        m.value.owners.values().flatten().map(SlotRange::len).sum()
    });
    let failed = routing.failed_slots() - (usize::from(SLOTS) - assigned);
    let fenced = node.fenced(routing);
    let ok = failed == 0 && assigned == usize::from(SLOTS) && !fenced;
    let epoch = routing.view.slot_map.as_ref().map_or(0, |m| m.value.epoch);
    let size = routing
        .view
        .slot_map
        .as_ref()
        .map_or(0, |m| m.value.owners.len());
    format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:{failed}\r\ncluster_known_nodes:{}\r\ncluster_size:{size}\r\ncluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\ncluster_etcd_connected:{}\r\ncluster_lease_confirmed:{}\r\n",
        if ok { "ok" } else { "fail" },
        assigned - failed,
        routing.view.members.len(),
        u8::from(routing.view.connected),
        u8::from(!fenced),
    )
}
