//! An upstream tier as the store: another Mantle or any Redis-compatible server, reached with
//! the `redis` crate's reconnecting multiplexed connection. Reads that miss this tier's cache
//! go up; writes go through to it (it is the source of truth) before they are acknowledged.

use super::record::Record;
use super::{Condition, StoreError};
use bytes::Bytes;
use redis::aio::ConnectionManager;

pub struct UpstreamStore {
    url: String,
    connection: ConnectionManager,
}

impl UpstreamStore {
    pub async fn connect(url: &str) -> Result<UpstreamStore, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError(format!("invalid upstream '{url}': {e}")))?;
        let connection = ConnectionManager::new(client)
            .await
            .map_err(|e| StoreError(format!("cannot reach upstream {url}: {e}")))?;
        Ok(UpstreamStore {
            url: url.to_string(),
            connection,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn fail(&self, e: redis::RedisError) -> StoreError {
        StoreError(format!("upstream {}: {e}", self.url))
    }

    /// The value and its expiry (from `PTTL`), fetched in one round trip.
    pub async fn get(&self, key: &[u8], now_ms: u64) -> Result<Option<Record>, StoreError> {
        let mut connection = self.connection.clone();
        let (value, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("GET")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(value.map(|value| Record {
            value: Bytes::from(value),
            expires_at_ms: if pttl > 0 { now_ms + pttl as u64 } else { 0 },
        }))
    }

    pub async fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let n: u64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(n > 0)
    }

    /// `SET` upstream with the remaining time to live and the condition; the upstream decides
    /// NX/XX atomically. Returns whether it wrote.
    pub async fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(record.value.as_ref());
        if record.expires_at_ms != 0 {
            command
                .arg("PX")
                .arg(record.expires_at_ms.saturating_sub(now_ms).max(1));
        }
        match condition {
            Condition::Always => {}
            Condition::IfAbsent => {
                command.arg("NX");
            }
            Condition::IfPresent => {
                command.arg("XX");
            }
        }
        let mut connection = self.connection.clone();
        let reply: Option<String> = command
            .query_async(&mut connection)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(reply.is_some())
    }

    pub async fn set_many(&self, pairs: &[(Bytes, Record)], now_ms: u64) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for (key, record) in pairs {
            let command = pipe.cmd("SET").arg(key.as_ref()).arg(record.value.as_ref());
            if record.expires_at_ms != 0 {
                command
                    .arg("PX")
                    .arg(record.expires_at_ms.saturating_sub(now_ms).max(1));
            }
            command.ignore();
        }
        let mut connection = self.connection.clone();
        pipe.query_async::<_, ()>(&mut connection)
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn delete(&self, keys: &[Bytes]) -> Result<u64, StoreError> {
        let mut command = redis::cmd("DEL");
        for key in keys {
            command.arg(key.as_ref());
        }
        let mut connection = self.connection.clone();
        command
            .query_async(&mut connection)
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn key_count(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        redis::cmd("DBSIZE")
            .query_async(&mut connection)
            .await
            .map_err(|e| self.fail(e))
    }
}
