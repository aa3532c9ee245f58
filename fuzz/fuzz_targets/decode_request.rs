//! Fuzzes the request decoder (`server::decoder`), the first code that touches client bytes.
//! Beyond "never panics", it checks that feeding the input in arbitrary pieces yields exactly
//! what feeding it whole does, since TCP may split a request anywhere.
//!
//! Run: `cargo +nightly fuzz run decode_request` from this directory (see docs/server.md).

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use server::decoder::{Decoder, Limits};

/// Decodes `input`, handing it over `piece` bytes at a time; returns the requests decoded and
/// whether a protocol error stopped it.
fn decode(input: &[u8], piece: usize, limits: Limits) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut decoder = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut args = Vec::new();
    let mut requests = Vec::new();
    for chunk in input.chunks(piece.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf, &mut args) {
                Ok(true) => requests.push(args.iter().map(|a| a.to_vec()).collect()),
                Ok(false) => break,
                Err(_) => return (requests, true),
            }
        }
    }
    (requests, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    // Small limits so the fuzzer reaches the rejections quickly.
    let limits = Limits {
        max_bulk_len: 64 + u64::from(control & 0x3f),
        max_args: 16,
    };
    let whole = decode(input, input.len(), limits);
    let pieces = decode(input, 1 + usize::from(control >> 6), limits);
    assert_eq!(whole, pieces);
});
