//! `--connection-groups N`: many clients' connections served by N tasks instead of a task each
//! (crates/server/src/connection_groups.rs). Every client still gets its own replies in order
//! while the others run, a client that leaves mid-request ends alone, a long pipeline is
//! answered whole, and shutdown ends the groups with an idle client still connected.

mod common;

use common::{request, TestServer};
use std::io::Read;
use std::time::Duration;

const CLIENTS: usize = 8;
const ROUNDS: usize = 200;

fn served_in(groups: usize) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| c.connection_groups = groups);
    let url = server.url();
    // Connected before the busy clients and idle through them: the drain below must end it.
    let idle = server.raw();

    let busy: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                for round in 0..ROUNDS {
                    let key = format!("g{groups}:c{i}:{round}");
                    let _: () = redis::cmd("SET")
                        .arg(&key)
                        .arg(round)
                        .query(&mut c)
                        .unwrap();
                    let got: usize = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
                    assert_eq!(got, round, "client {i} read another's reply");
                    let counts: Vec<usize> = redis::pipe()
                        .cmd("INCR")
                        .arg(format!("g{groups}:n{i}"))
                        .cmd("INCR")
                        .arg(format!("g{groups}:n{i}"))
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(counts, vec![2 * round + 1, 2 * round + 2]);
                }
            })
        })
        .collect();

    // A client that leaves halfway through a request, while the others are served.
    let mut gone = server.raw();
    gone.send(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf");
    drop(gone);

    // One write of a thousand requests: every reply comes back, in order.
    let mut long = server.raw();
    let mut pipeline = Vec::new();
    for i in 0..1000 {
        pipeline.extend(request(&[b"ECHO", format!("{i:04}").as_bytes()]));
    }
    long.send(&pipeline);
    let mut replies = vec![0u8; 1000 * "$4\r\n0000\r\n".len()];
    long.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    long.stream.read_exact(&mut replies).unwrap();
    let expected: Vec<u8> = (0..1000)
        .flat_map(|i| format!("$4\r\n{i:04}\r\n").into_bytes())
        .collect();
    assert!(
        replies == expected,
        "the long pipeline's replies are out of order"
    );

    for client in busy {
        client.join().expect("a busy client failed");
    }
    let mut c = server.client();
    let half: Option<String> = redis::cmd("GET").arg("half").query(&mut c).unwrap();
    assert_eq!(half, None, "a request cut off by its client never runs");
    drop(c);
    drop(long);
    server.shutdown().expect("a clean shutdown");
    let mut idle = idle;
    assert!(
        idle.is_closed(),
        "shutdown ended the idle client's connection"
    );
}

#[test]
fn one_group_serves_every_client_in_order_and_drains() {
    served_in(1);
}

#[test]
fn two_groups_serve_every_client_in_order_and_drain() {
    served_in(2);
}

#[test]
fn a_task_per_connection_is_the_default() {
    let config = server::Config::new(server::Backend::Upstream {
        url: "redis://127.0.0.1:1".into(),
    });
    assert_eq!(config.connection_groups, 0);
}
