//! Operator actions on a running server from another process (what `mantle policy push`
//! calls): `POLICY` commands sent over the client side of the server's own RESP code (the
//! upstream tier's connection), so neither the CLI nor the server carries a second protocol
//! implementation.

use anyhow::Context;
use std::time::Duration;
use store::upstream::wire::{Conn, Reply, Target};

/// How long connecting, and then the whole exchange, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest reply accepted: a version number is all the push expects.
const MAX_REPLY_BULK: u64 = 1 << 20;

/// Stores `source` as the next version of policy `name` on the server at `addr`
/// (`HOST:PORT` or `redis://[[user]:password@]host[:port]`) and activates it; returns the new
/// version number.
pub fn push_policy(addr: &str, name: &str, source: &str, author: &str) -> anyhow::Result<u32> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("redis://{addr}")
    };
    let target = Target::parse(&url)
        .map_err(|why| anyhow::anyhow!("invalid server address '{addr}': {why}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the client's runtime")?;
    let reply = runtime.block_on(async {
        tokio::time::timeout(EXCHANGE_TIMEOUT, async {
            let mut conn = Conn::open(&target, CONNECT_TIMEOUT, MAX_REPLY_BULK)
                .await
                .map_err(|e| anyhow::anyhow!("cannot connect to {addr}: {e}"))?;
            conn.push(&[
                b"POLICY",
                b"LOAD",
                name.as_bytes(),
                source.as_bytes(),
                b"AUTHOR",
                author.as_bytes(),
            ]);
            conn.flush()
                .await
                .map_err(|e| anyhow::anyhow!("{addr}: {e}"))?;
            conn.read_reply()
                .await
                .map_err(|e| anyhow::anyhow!("{addr}: {e}"))
        })
        .await
        .map_err(|_| anyhow::anyhow!("{addr}: no reply within {EXCHANGE_TIMEOUT:?}"))?
    })?;
    match reply {
        Reply::Integer(version) => {
            u32::try_from(version).with_context(|| format!("{addr}: unexpected version {version}"))
        }
        // The server's message without its error code (`ERR`), as an operator reads it.
        Reply::Error(line) => {
            let detail = line.split_once(' ').map_or(line.as_str(), |(_, rest)| rest);
            anyhow::bail!("{addr}: {detail}")
        }
        other => anyhow::bail!("{addr}: unexpected reply {other:?}"),
    }
}
