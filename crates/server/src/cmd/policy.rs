//! POLICY LOAD|USE|LIST|SHOW|ROLLBACK|STATUS|PARAM|LOG: managing the live policy through the
//! durable registry (see `live`); POLICY TICK [now] and POLICY CLOCK now drive a server started
//! with `--tick manual`. This module only reads arguments; the engine's thread does the work
//! and builds the reply (CLOCK only sets the policy clock, on the connection: it must take
//! effect before the connection's next request is recorded).

use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::live::Op;
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

impl PolicyCmd {
    pub fn parse(parse: &mut Parse<'_>) -> Result<PolicyCmd, ParseError> {
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
            other => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try POLICY LOAD, USE, LIST, SHOW, ROLLBACK, STATUS, PARAM, LOG, TICK or CLOCK.",
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

    pub async fn apply(self, instance: &Instance, session: &Session) -> Frame {
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
        instance.live.request(op).await
    }
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
}
