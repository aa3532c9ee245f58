//! DBSIZE: keys in the store behind the cache (the whole data set, not just what is cached).

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;

pub async fn apply(instance: &Instance) -> Frame {
    match instance.db.dbsize().await {
        Ok(n) => Frame::Integer(n as i64),
        Err(e) => store_error(e),
    }
}
