//! LATENCY LATEST | HISTOGRAM [command ...] | HELP, from the per-command latency histograms
//! (`metrics::CommandLatencies`). LATEST lists, per command, the latest call that took at
//! least `latency-monitor-threshold` milliseconds (CONFIG SET; 0, the default, records none,
//! as in Redis): the command's name as the event, when, that call's and the slowest call's
//! milliseconds. HISTOGRAM gives, per command that ran, its calls and cumulative counts under
//! each power of two of microseconds, in Redis 7's shape.

use super::{CommandSpec, Declared, Flags, Keys, COMMANDS};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub enum LatencyCmd {
    Latest,
    /// The commands asked for (all that ran when empty).
    Histogram(Vec<Bytes>),
    Help,
}

const HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the",
    "    specified command names. If no commands are specified then all histograms are",
    "    replied.",
    "HELP",
    "    Prints this help.",
];

impl Declared<'_> for LatencyCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "latency",
        arity: -2,
        flags: Flags::ADMIN.with(Flags::LOADING).with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<LatencyCmd, ParseError> {
        let sub = parse.next_bytes()?;
        let cmd = match sub.to_ascii_lowercase().as_slice() {
            b"latest" => LatencyCmd::Latest,
            b"histogram" => return Ok(LatencyCmd::Histogram(parse.rest().to_vec())),
            b"help" => LatencyCmd::Help,
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try LATENCY HELP.",
                    super::printable(&sub, 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let latencies = &instance.db.metrics().commands;
        match self {
            LatencyCmd::Latest => Frame::Array(
                COMMANDS
                    .iter()
                    .enumerate()
                    .filter_map(|(row, spec)| {
                        let figures = latencies.read(row);
                        let (at, us) = figures.latest_spike?;
                        Some(Frame::Array(vec![
                            Frame::static_bulk(spec.name),
                            Frame::Integer(at as i64),
                            Frame::Integer((us / 1000) as i64),
                            Frame::Integer((figures.max_us / 1000) as i64),
                        ]))
                    })
                    .collect(),
            ),
            LatencyCmd::Histogram(names) => Frame::Map(
                COMMANDS
                    .iter()
                    .enumerate()
                    .filter(|(_, spec)| {
                        names.is_empty()
                            || names
                                .iter()
                                .any(|n| n.eq_ignore_ascii_case(spec.name.as_bytes()))
                    })
                    .filter_map(|(row, spec)| {
                        let figures = latencies.read(row);
                        (figures.calls > 0).then(|| {
                            let buckets = figures
                                .power_of_two_buckets()
                                .into_iter()
                                .map(|(us, n)| {
                                    (Frame::Integer(us as i64), Frame::Integer(n as i64))
                                })
                                .collect();
                            (
                                Frame::static_bulk(spec.name),
                                Frame::Map(vec![
                                    (
                                        Frame::static_bulk("calls"),
                                        Frame::Integer(figures.calls as i64),
                                    ),
                                    (Frame::static_bulk("histogram_usec"), Frame::Map(buckets)),
                                ]),
                            )
                        })
                    })
                    .collect(),
            ),
            LatencyCmd::Help => super::help_reply(HELP),
        }
    }
}
