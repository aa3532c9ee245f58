//! `FUNCTION DUMP` / `RESTORE` payloads. Not Redis's RDB encoding (Mantle has no RDB): one
//! header line `MANTLE-FUNCTIONS 1 <sha1 of the rest, hex>` then a JSON array of
//! `{"name": ..., "code": ...}`, the active version of each library. The checksum catches a
//! payload cut or changed in transit; a payload of another format or version is refused.

use serde::{Deserialize, Serialize};

const MAGIC: &str = "MANTLE-FUNCTIONS";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedLibrary {
    pub name: String,
    pub code: String,
}

pub fn encode(libraries: &[DumpedLibrary]) -> Vec<u8> {
    let body = serde_json::to_vec(libraries).unwrap_or_default();
    let sum = sha1_smol::Sha1::from(&body).digest().to_string();
    let mut payload = format!("{MAGIC} {FORMAT_VERSION} {sum}\n").into_bytes();
    payload.extend_from_slice(&body);
    payload
}

pub fn decode(payload: &[u8]) -> Result<Vec<DumpedLibrary>, String> {
    let wrong = || "ERR payload version or checksum are wrong".to_string();
    let end = payload.iter().position(|&b| b == b'\n').ok_or_else(wrong)?;
    let header = std::str::from_utf8(&payload[..end]).map_err(|_| wrong())?;
    let body = &payload[end + 1..];
    let mut words = header.split(' ');
    if words.next() != Some(MAGIC) || words.next() != Some("1") {
        return Err(wrong());
    }
    let sum = sha1_smol::Sha1::from(body).digest().to_string();
    if words.next() != Some(sum.as_str()) || words.next().is_some() {
        return Err(wrong());
    }
    serde_json::from_slice(body).map_err(|_| wrong())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_round_trips_and_any_change_is_refused() {
        let libraries = vec![DumpedLibrary {
            name: "a".into(),
            code: "#!lua name=a\n".into(),
        }];
        let payload = encode(&libraries);
        assert_eq!(decode(&payload).unwrap(), libraries);
        for at in [0, 20, payload.len() - 3] {
            let mut damaged = payload.clone();
            damaged[at] ^= 1;
            assert!(decode(&damaged).is_err(), "byte {at}");
        }
        assert!(decode(&payload[..payload.len() - 1]).is_err());
        assert!(decode(b"garbage").is_err());
    }
}
