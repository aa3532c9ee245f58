//! POLICY LOAD|USE|LIST|SHOW|ROLLBACK|STATUS|PARAM|LOG|UNREADABLE: managing the live policy through the
//! durable registry (see `live`); POLICY TICK [now] and POLICY CLOCK now drive a server started
//! with `--tick manual`. This module reads arguments and turns the engine thread's typed
//! [`Reply`] into a frame; the thread does the work (CLOCK only sets the policy clock, on the
//! connection: it must take effect before the connection's next request is recorded).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::live::reply::{Status, TickReport, VersionSummary};
use crate::live::{Op, Reply};
use crate::metrics::{CandidateFigures, ShadowReport};
use crate::parse::{Parse, ParseError};

/// `POLICY LOG` without a count.
pub const DEFAULT_LOG_LINES: usize = 20;

pub struct PolicyCmd {
    op: Command,
    /// LOAD without AUTHOR: filled in from the session when applied.
    needs_author: bool,
}

/// What the command does: most go to the engine's thread; CLOCK is answered here.
#[derive(Debug, PartialEq)]
enum Command {
    Engine(Op),
    Clock(f64),
}

fn seconds(text: &[u8]) -> Result<f64, ParseError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|t| t.is_finite())
        .ok_or_else(|| {
            ParseError::Other(format!(
                "invalid time '{}': expected a number of seconds",
                super::printable(text, 64)
            ))
        })
}

fn version(text: &str) -> Result<u32, ParseError> {
    text.trim_start_matches(['v', '@'])
        .parse()
        .map_err(|_| ParseError::Other(format!("invalid policy version '{text}'")))
}

/// The `k=v` words left in the command.
fn options(parse: &mut Parse<'_>) -> Vec<String> {
    parse
        .rest()
        .iter()
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// `POLICY SHADOW ADD name[@N] [k=v ...] | LIST | STATUS [name] | DROP name`.
fn shadow(parse: &mut Parse<'_>) -> Result<Op, ParseError> {
    let sub = parse.next_string()?.to_ascii_lowercase();
    Ok(match sub.as_str() {
        "add" => {
            let spec = parse.next_string()?;
            let (name, version) = match spec.split_once('@') {
                Some((name, v)) => (name.to_string(), Some(version(v)?)),
                None => (spec, None),
            };
            Op::ShadowAdd {
                name,
                version,
                options: options(parse),
            }
        }
        "list" => Op::ShadowList,
        "status" => Op::ShadowStatus {
            name: parse
                .next_optional()
                .map(|n| String::from_utf8_lossy(&n).into_owned()),
        },
        "drop" => Op::ShadowDrop {
            name: parse.next_string()?,
        },
        other => {
            return Err(ParseError::Other(format!(
                "unknown POLICY SHADOW subcommand '{}'. Try ADD, LIST, STATUS or DROP.",
                super::printable(other.as_bytes(), 64)
            )))
        }
    })
}

/// `POLICY SWITCH LOAD [k=v ...] source | OFF | STATUS`: the source is the last word, so
/// `redis-cli -x POLICY SWITCH LOAD dwell=3 < policies/switch.lua` works.
fn switch(parse: &mut Parse<'_>) -> Result<Op, ParseError> {
    let sub = parse.next_string()?.to_ascii_lowercase();
    Ok(match sub.as_str() {
        "load" => {
            let mut words = options(parse);
            let source = words.pop().ok_or(ParseError::Syntax)?;
            Op::SwitchLoad {
                source,
                options: words,
            }
        }
        "off" => Op::SwitchOff,
        "status" => Op::SwitchStatus,
        other => {
            return Err(ParseError::Other(format!(
                "unknown POLICY SWITCH subcommand '{}'. Try LOAD, OFF or STATUS.",
                super::printable(other.as_bytes(), 64)
            )))
        }
    })
}

impl Declared<'_> for PolicyCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "policy",
        arity: -2,
        flags: Flags::ADMIN.with(Flags::NOSCRIPT),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<PolicyCmd, ParseError> {
        let sub = parse.next_string()?.to_ascii_lowercase();
        let mut needs_author = false;
        let op = match sub.as_str() {
            "load" => {
                let name = parse.next_string()?;
                let source = String::from_utf8(parse.next_bytes()?.to_vec())
                    .map_err(|_| ParseError::Other("policy source is not UTF-8".into()))?;
                let author = match parse.next_optional() {
                    Some(word) if word.eq_ignore_ascii_case(b"author") => parse.next_string()?,
                    Some(_) => return Err(ParseError::Syntax),
                    None => {
                        needs_author = true;
                        String::new()
                    }
                };
                Op::Load {
                    name,
                    source,
                    author,
                }
            }
            "use" => Op::Use {
                name: parse.next_string()?,
                version: parse.next_optional().map(|v| version(&String::from_utf8_lossy(&v))).transpose()?,
            },
            "list" => Op::List,
            "show" => Op::Show {
                name: parse.next_string()?,
                version: parse.next_optional().map(|v| version(&String::from_utf8_lossy(&v))).transpose()?,
            },
            "rollback" => Op::Rollback,
            "tick" => Op::Tick {
                now: parse.next_optional().map(|t| seconds(&t)).transpose()?,
            },
            "clock" => {
                let now = seconds(&parse.next_bytes()?)?;
                parse.finish()?;
                return Ok(PolicyCmd {
                    op: Command::Clock(now),
                    needs_author: false,
                });
            }
            "status" => Op::Status,
            "param" => Op::Param {
                key: parse.next_string()?,
                value: parse.next_string()?,
            },
            "log" => Op::Log {
                count: match parse.next_optional() {
                    Some(n) => std::str::from_utf8(&n)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or(ParseError::NotInteger)?,
                    None => DEFAULT_LOG_LINES,
                },
            },
            "shadow" => shadow(parse)?,
            "switch" => switch(parse)?,
            "unreadable" => match parse.next_optional() {
                None => Op::Unreadable,
                Some(word) if word.eq_ignore_ascii_case(b"drop") => Op::DropUnreadable {
                    key: parse.next_string()?,
                },
                Some(_) => return Err(ParseError::Syntax),
            },
            other => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try POLICY LOAD, USE, LIST, SHOW, ROLLBACK, STATUS, PARAM, LOG, TICK, CLOCK, SHADOW, SWITCH or UNREADABLE.",
                    super::printable(other.as_bytes(), 64)
                )))
            }
        };
        parse.finish()?;
        Ok(PolicyCmd {
            op: Command::Engine(op),
            needs_author,
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let mut op = match self.op {
            Command::Engine(op) => op,
            Command::Clock(now) => {
                return match instance.db.series().clock.set(now) {
                    Ok(()) => Frame::ok(),
                    Err(e) => Frame::err(e),
                }
            }
        };
        if let (Op::Load { author, .. }, true) = (&mut op, self.needs_author) {
            *author = match (&session.name, session.peer) {
                (Some(name), _) => String::from_utf8_lossy(name).into_owned(),
                (None, Some(peer)) => format!("client {} from {peer}", session.id),
                (None, None) => format!("client {}", session.id),
            };
        }
        reply_frame(instance.live.request(op).await)
    }
}

/// The frame for the engine's reply (also what the dashboard's JSON is made from).
pub fn reply_frame(reply: Result<Reply, String>) -> Frame {
    match reply {
        Ok(Reply::Done) => Frame::ok(),
        Ok(Reply::Version(version)) => Frame::Integer(i64::from(version)),
        Ok(Reply::Reinstated(text) | Reply::Source(text)) => Frame::bulk_str(&text),
        Ok(Reply::Versions(versions)) => Frame::Array(versions.iter().map(version_line).collect()),
        Ok(Reply::Status(status)) => status_map(&status),
        Ok(Reply::Log(events)) => {
            Frame::Array(events.iter().map(|e| Frame::bulk_str(&e.line())).collect())
        }
        Ok(Reply::Tick(report)) => tick_map(&report),
        Ok(Reply::Name(name)) => Frame::bulk_str(&name),
        Ok(Reply::Lines(lines)) => Frame::Array(lines.iter().map(|l| Frame::bulk_str(l)).collect()),
        Ok(Reply::Candidates(all)) => Frame::Array(all.iter().map(candidate_map).collect()),
        Ok(Reply::Candidate(one)) => candidate_map(&one),
        Ok(Reply::Switch(report)) => switch_map(&report),
        Err(message) => Frame::err(message),
    }
}

fn version_line(v: &VersionSummary) -> Frame {
    Frame::bulk_str(&format!(
        "{} loaded_at_ms={} author={:?} bytes={}{}",
        v.id,
        v.loaded_at_ms,
        v.author,
        v.bytes,
        if v.active { " active" } else { "" }
    ))
}

fn int(n: u64) -> Frame {
    Frame::Integer(n as i64)
}

fn map(pairs: Vec<(&'static str, Frame)>) -> Frame {
    Frame::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Frame::static_bulk(k), v))
            .collect(),
    )
}

fn status_map(s: &Status) -> Frame {
    let text = Frame::bulk_str;
    map(vec![
        ("active", text(&s.active)),
        ("previous", text(&s.previous)),
        ("tick_ms", int(s.tick_ms)),
        ("ticks", int(s.ticks)),
        ("actions", int(s.actions)),
        ("errors", int(s.errors)),
        ("fallbacks", int(s.fallbacks)),
        ("last_decision", text(&s.last_decision)),
        ("last_error", text(&s.last_error)),
        ("durable", int(u64::from(s.durable))),
        ("suspended", text(&s.suspended)),
        ("activated_at_us", int(s.activated_at_us)),
        ("params", text(&params_line(&s.params))),
        ("busy_ms", int(s.busy_ms)),
        ("busy_with", text(&s.busy_with)),
    ])
}

/// `k=v k2=v2`: the parameters as one RESP string.
fn params_line(params: &std::collections::BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
}

/// A float as RESP2 clients read it: a bulk string.
fn float(x: f64) -> Frame {
    Frame::bulk_str(&x.to_string())
}

fn candidate_map(c: &CandidateFigures) -> Frame {
    let w = &c.window;
    map(vec![
        ("name", Frame::bulk_str(&c.name)),
        ("role", Frame::static_bulk(c.role)),
        ("policy", Frame::bulk_str(&c.policy)),
        ("params", Frame::bulk_str(&c.params)),
        ("sample", float(c.sample)),
        ("active", int(u64::from(c.active))),
        ("window_ticks", int(w.ticks)),
        ("hit_ratio", float(w.hit_ratio)),
        ("miss_ratio", float(w.miss_ratio)),
        ("lookups", float(w.lookups)),
        ("hits", float(w.hits)),
        ("misses", float(w.misses)),
        ("mean_objects", float(w.mean_objects)),
        ("peak_objects", float(w.peak_objects)),
        ("mean_bytes", float(w.mean_bytes)),
        ("peak_bytes", float(w.peak_bytes)),
        ("evictions", float(w.evictions)),
        ("decisions", int(w.decisions)),
        ("errors", int(w.errors)),
        ("total_lookups", float(c.total_lookups)),
        ("total_hits", float(c.total_hits)),
        ("total_misses", float(c.total_misses)),
        ("ticks", int(c.ticks)),
        ("total_decisions", int(c.decisions)),
        ("total_errors", int(c.errors)),
        ("capped_ticks", int(c.capped_ticks)),
        ("objects", int(c.objects)),
        ("max_objects", int(c.max_objects)),
        ("metadata_bytes", int(c.metadata_bytes)),
    ])
}

fn switch_map(r: &ShadowReport) -> Frame {
    map(vec![
        ("loaded", int(u64::from(!r.switch_policy.is_empty()))),
        ("calls", int(r.switch_calls)),
        ("errors", int(r.switch_errors)),
        ("switches", int(r.switches)),
        ("last_switch", Frame::bulk_str(&r.last_switch)),
        (
            "shadows",
            int(r.candidates.iter().filter(|c| c.role == "shadow").count() as u64),
        ),
        ("events_dropped", int(r.dropped)),
    ])
}

fn tick_map(t: &TickReport) -> Frame {
    let optional = |n: Option<u64>| n.map_or(Frame::Null, int);
    map(vec![
        ("tick", int(t.tick)),
        ("now", Frame::bulk_str(&t.now.to_string())),
        ("action", Frame::bulk_str(&t.action)),
        (
            "error",
            t.error.as_deref().map_or(Frame::Null, Frame::bulk_str),
        ),
        ("cache_objects", int(t.cache_objects)),
        ("cache_bytes", int(t.cache_bytes)),
        ("capacity_objects", optional(t.capacity_objects)),
        ("capacity_bytes", optional(t.capacity_bytes)),
        ("hits", int(t.hits)),
        ("misses", int(t.misses)),
        ("evictions", int(t.evictions)),
        ("store_reads", int(t.store_reads)),
        ("store_writes", int(t.store_writes)),
        ("series_events", int(t.series_events)),
        ("series_keys", int(t.series_keys)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(words: &[&str]) -> Result<PolicyCmd, ParseError> {
        let args: Vec<Bytes> = words.iter().map(|w| Bytes::from(w.to_string())).collect();
        PolicyCmd::parse(&mut Parse::new(&args))
    }

    #[test]
    fn subcommands_parse() {
        let load = parse(&[
            "POLICY",
            "load",
            "p",
            "function when() return false end",
            "AUTHOR",
            "ops",
        ])
        .unwrap();
        assert!(matches!(load.op, Command::Engine(Op::Load { ref author, .. }) if author == "ops"));
        assert!(!load.needs_author);
        assert!(parse(&["POLICY", "LOAD", "p", "x"]).unwrap().needs_author);
        assert_eq!(
            parse(&["POLICY", "USE", "p", "3"]).unwrap().op,
            Command::Engine(Op::Use {
                name: "p".into(),
                version: Some(3)
            })
        );
        assert_eq!(
            parse(&["POLICY", "LOG"]).unwrap().op,
            Command::Engine(Op::Log {
                count: DEFAULT_LOG_LINES
            })
        );
        assert_eq!(
            parse(&["POLICY", "TICK", "12.5"]).unwrap().op,
            Command::Engine(Op::Tick { now: Some(12.5) })
        );
        assert_eq!(
            parse(&["POLICY", "TICK"]).unwrap().op,
            Command::Engine(Op::Tick { now: None })
        );
        assert_eq!(
            parse(&["POLICY", "CLOCK", "3"]).unwrap().op,
            Command::Clock(3.0)
        );
        assert!(parse(&["POLICY", "TICK", "soon"]).is_err());
        assert!(parse(&["POLICY", "CLOCK", "nan"]).is_err());
        assert!(parse(&["POLICY", "CLOCK"]).is_err());
        assert!(parse(&["POLICY", "USE", "p", "three"]).is_err());
        assert!(parse(&["POLICY", "ROLLBACK", "extra"]).is_err());
        assert!(parse(&["POLICY", "DANCE"]).is_err());
    }

    #[test]
    fn replies_become_the_frames_clients_read() {
        assert_eq!(reply_frame(Ok(Reply::Done)), Frame::ok());
        assert_eq!(reply_frame(Ok(Reply::Version(3))), Frame::Integer(3));
        assert_eq!(
            reply_frame(Err("no policy named 'x'".into())),
            Frame::err("no policy named 'x'")
        );
        let summary = VersionSummary {
            id: crate::live::registry::VersionRef {
                name: "p".into(),
                version: 2,
            },
            loaded_at_ms: 5,
            author: "ops".into(),
            bytes: 10,
            active: true,
        };
        assert_eq!(
            reply_frame(Ok(Reply::Versions(vec![summary]))),
            Frame::Array(vec![Frame::bulk_str(
                "p@2 loaded_at_ms=5 author=\"ops\" bytes=10 active"
            )])
        );
        let report = TickReport {
            tick: 1,
            now: 2.5,
            action: "evict:3".into(),
            error: None,
            cache_objects: 4,
            cache_bytes: 40,
            capacity_objects: Some(10),
            capacity_bytes: None,
            hits: 1,
            misses: 2,
            evictions: 3,
            store_reads: 2,
            store_writes: 4,
            series_events: 0,
            series_keys: 0,
        };
        let Frame::Map(pairs) = reply_frame(Ok(Reply::Tick(Box::new(report)))) else {
            panic!("a tick report is a map");
        };
        assert_eq!(pairs.len(), 15);
        assert_eq!(
            pairs[1],
            (Frame::static_bulk("now"), Frame::bulk_str("2.5"))
        );
        assert_eq!(pairs[3], (Frame::static_bulk("error"), Frame::Null));
        assert_eq!(
            pairs[7],
            (Frame::static_bulk("capacity_bytes"), Frame::Null)
        );
    }
}
