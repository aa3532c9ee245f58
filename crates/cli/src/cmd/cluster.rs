//! `mantle cluster status|rebalance|move`: an operator's view and changes of a cluster's
//! slot map in etcd (see docs/cluster.md).

use anyhow::Result;
use cluster::{admin, ClusterConfig, ControlPlane, NodeId};
use slots::SlotRange;

#[derive(clap::Args)]
pub struct Args {
    /// The cluster's etcd (etcd://HOST:PORT[,HOST:PORT...]), as given to `mantle serve`.
    /// (`--etcd` is the old spelling, still accepted.)
    #[arg(long = "cluster", alias = "etcd", value_name = "etcd://HOST:PORT")]
    pub etcd: String,
    /// The cluster's name, as given to `mantle serve`. (`--name` is the old spelling.)
    #[arg(long = "cluster-name", alias = "name", value_name = "NAME")]
    pub name: String,
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Members, slot ranges per node, unowned slots and failed owners.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Spread every slot evenly over the live members, moving as few as possible (each
    /// range migrates with its keys).
    Rebalance,
    /// Move a slot range (N or A-B) with its keys to a live member, while clients keep
    /// using it; returns when the target owns it.
    Move {
        #[arg(value_name = "SLOTS", value_parser = parse_range)]
        slots: SlotRange,
        /// The node that takes them.
        #[arg(long, value_name = "NODE")]
        to: String,
    },
    /// Abort the migration of exactly this range (its source keeps it).
    Abort {
        #[arg(value_name = "SLOTS", value_parser = parse_range)]
        slots: SlotRange,
    },
}

fn print_step(step: &admin::Step) {
    match &step.from {
        Some(from) => println!(
            "moved slots {} from {from} to {} in {:.3}s",
            step.range,
            step.to,
            step.took.as_secs_f64()
        ),
        None => println!("assigned unowned slots {} to {}", step.range, step.to),
    }
}

fn parse_range(text: &str) -> Result<SlotRange, String> {
    SlotRange::parse(text).map_err(|e| e.to_string())
}

pub fn run(args: Args) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let config = ClusterConfig::new(&args.etcd, &args.name)
            .map_err(|e| anyhow::anyhow!("--cluster/--cluster-name: {e}"))?;
        let plane = ControlPlane::connect(config).await?;
        match args.action {
            Action::Status { json } => {
                let status = admin::status(&plane).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                } else {
                    print_status(&status);
                }
            }
            Action::Rebalance => {
                let map = admin::rebalance(&plane, print_step).await?;
                println!("slot map epoch {}:", map.value.epoch);
                print_owners(&map.value);
            }
            Action::Move { slots, to } => {
                let to = NodeId::new(&to).map_err(|e| anyhow::anyhow!("--to: {e}"))?;
                let map = admin::move_slots(&plane, slots, &to, print_step).await?;
                println!(
                    "slots {slots} now owned by {to} (slot map epoch {})",
                    map.value.epoch
                );
            }
            Action::Abort { slots } => {
                let map = admin::abort(&plane, slots).await?;
                println!(
                    "migration of slots {slots} aborted (slot map epoch {})",
                    map.value.epoch
                );
            }
        }
        Ok(())
    })
}

fn print_owners(map: &cluster::SlotMap) {
    for (node, ranges) in &map.owners {
        let text: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        println!(
            "  {node}: {} slots ({})",
            map.slot_count(node),
            text.join(" ")
        );
    }
}

fn print_status(s: &admin::Status) {
    println!(
        "cluster {}: {}",
        s.name,
        if s.ok() { "ok" } else { "not ok" }
    );
    println!("members ({}):", s.members.len());
    for m in &s.members {
        println!("  {} at {}", m.id, m.addr);
    }
    match &s.slot_map {
        Some(map) => {
            println!(
                "slot map epoch {} (etcd revision {}):",
                map.epoch, s.revision
            );
            print_owners(map);
            for m in &map.migrations {
                println!("  migrating {} from {} to {}", m.range, m.from, m.to);
            }
        }
        None => println!("no slot map yet (no node has joined)"),
    }
    if !s.unassigned.is_empty() {
        let text: Vec<String> = s.unassigned.iter().map(ToString::to_string).collect();
        println!("unassigned slots: {}", text.join(" "));
    }
    for id in &s.failed {
        println!("owner {id} is not alive: its slots answer CLUSTERDOWN");
    }
}
