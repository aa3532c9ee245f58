//! Operator actions on a running server from another process (what `mantle policy push`
//! calls): a plain Redis-protocol client sending `POLICY` commands, so the CLI holds no
//! protocol code.

use anyhow::Context;

/// Stores `source` as the next version of policy `name` on the server at `addr`
/// (`HOST:PORT` or `redis://...`) and activates it; returns the new version number.
pub fn push_policy(addr: &str, name: &str, source: &str, author: &str) -> anyhow::Result<u32> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("redis://{addr}")
    };
    let client = redis::Client::open(url.as_str())
        .with_context(|| format!("invalid server address '{addr}'"))?;
    let mut connection = client
        .get_connection()
        .with_context(|| format!("cannot connect to {addr}"))?;
    let version: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg(name)
        .arg(source)
        .arg("AUTHOR")
        .arg(author)
        .query(&mut connection)
        .map_err(|e| anyhow::anyhow!("{addr}: {}", e.detail().unwrap_or(&e.to_string())))?;
    u32::try_from(version).with_context(|| format!("{addr}: unexpected version {version}"))
}
