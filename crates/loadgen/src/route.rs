//! Where a trace request goes: to the server the replay was given, or, when that server is a
//! cluster node that redirects (`--cluster-mode client`), to the node its key's slot was last
//! redirected to. `-MOVED` is followed and remembered per slot (a connection per node, opened
//! as redirections name them); `-ASK` is followed once (`ASKING` first) and not remembered.
//! In proxy mode nothing is redirected and every request goes to the entry node.

use super::server::open_connection;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisResult, Value as Reply};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Redirections one request follows before its last error is its outcome.
const MAX_REDIRECTS: usize = 5;

#[derive(Clone)]
pub(super) struct Route {
    entry: MultiplexedConnection,
    shared: Arc<Shared>,
}

struct Shared {
    password: Option<String>,
    /// Slots whose owner a `-MOVED` named.
    owners: Mutex<HashMap<u16, Arc<str>>>,
    nodes: tokio::sync::Mutex<HashMap<Arc<str>, MultiplexedConnection>>,
}

impl Route {
    pub(super) fn new(entry: MultiplexedConnection, password: Option<String>) -> Route {
        Route {
            entry,
            shared: Arc::new(Shared {
                password,
                owners: Mutex::default(),
                nodes: tokio::sync::Mutex::default(),
            }),
        }
    }

    async fn node(&self, addr: &Arc<str>) -> RedisResult<MultiplexedConnection> {
        let mut nodes = self.shared.nodes.lock().await;
        if let Some(conn) = nodes.get(addr) {
            return Ok(conn.clone());
        }
        let conn = open_connection(addr, self.shared.password.as_deref()).await?;
        nodes.insert(Arc::clone(addr), conn.clone());
        Ok(conn)
    }

    /// Runs `cmd` (on a key of `slot`) where it belongs.
    pub(super) async fn query(&self, slot: u16, cmd: &redis::Cmd) -> RedisResult<Reply> {
        let owner = self
            .shared
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&slot)
            .cloned();
        let mut conn = match owner {
            Some(addr) => self.node(&addr).await?,
            None => self.entry.clone(),
        };
        let mut asking = false;
        let mut redirects = 0;
        loop {
            let reply = if asking {
                redis::pipe()
                    .cmd("ASKING")
                    .ignore()
                    .add_command(cmd.clone())
                    .query_async::<_, Vec<Reply>>(&mut conn)
                    .await
                    .map(|mut replies| replies.pop().unwrap_or(Reply::Nil))
            } else {
                cmd.query_async(&mut conn).await
            };
            let err = match reply {
                Err(e) if matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask) => e,
                other => return other,
            };
            let Some((addr, _)) = err.redirect_node() else {
                return Err(err);
            };
            if redirects == MAX_REDIRECTS {
                return Err(err);
            }
            redirects += 1;
            let addr: Arc<str> = Arc::from(addr);
            asking = err.kind() == ErrorKind::Ask;
            if !asking {
                self.shared
                    .owners
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(slot, Arc::clone(&addr));
            }
            conn = self.node(&addr).await?;
        }
    }
}
