//! A Mantle tier in front of another tier (`--upstream`): reads go up on a miss and fill the
//! lower cache, writes go through to the upper tier, which holds the data.

mod common;

use common::TestServer;
use redis::Commands;
use server::{Backend, Config};

fn tiers(tweak: impl FnOnce(&mut Config)) -> (tempfile::TempDir, TestServer, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let upper = TestServer::rocks(dir.path(), |_| {});
    let mut config = Config::new(Backend::Upstream { url: upper.url() });
    config.listen = "127.0.0.1:0".parse().unwrap();
    tweak(&mut config);
    let lower = TestServer::start(config);
    (dir, upper, lower)
}

#[test]
fn writes_go_through_and_reads_fill_on_a_miss() {
    let (_dir, upper, lower) = tiers(|_| {});
    let mut near = lower.client();
    let mut far = upper.client();

    let _: () = near.set("written-below", "1").unwrap();
    let v: String = far.get("written-below").unwrap();
    assert_eq!(v, "1", "a write is in the upper tier once acknowledged");

    let _: () = far.set("only-above", "2").unwrap();
    assert!(!lower.db.is_cached(b"only-above"));
    let v: String = near.get("only-above").unwrap();
    assert_eq!(v, "2");
    assert!(
        lower.db.is_cached(b"only-above"),
        "the miss filled the lower cache"
    );

    let n: i64 = redis::cmd("DBSIZE").query(&mut near).unwrap();
    assert_eq!(n, 2, "DBSIZE is the upper tier's");
    let n: i64 = redis::cmd("DEL")
        .arg("only-above")
        .query(&mut near)
        .unwrap();
    assert_eq!(n, 1);
    let gone: Option<String> = far.get("only-above").unwrap();
    assert_eq!(gone, None);

    let nx: Option<String> = redis::cmd("SET")
        .arg("written-below")
        .arg("x")
        .arg("NX")
        .query(&mut near)
        .unwrap();
    assert_eq!(nx, None, "NX is decided by the upper tier");
    let _: () = redis::cmd("MSET")
        .arg(&["m1", "a", "m2", "b"])
        .query(&mut near)
        .unwrap();
    let got: Vec<String> = redis::cmd("MGET")
        .arg(&["m1", "m2"])
        .query(&mut far)
        .unwrap();
    assert_eq!(got, vec!["a", "b"]);
}

#[test]
fn expiry_travels_between_tiers() {
    let (_dir, upper, lower) = tiers(|_| {});
    let mut near = lower.client();
    let mut far = upper.client();
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(&mut near)
        .unwrap();
    let ttl: i64 = redis::cmd("TTL").arg("t").query(&mut far).unwrap();
    assert!(ttl > 90 && ttl <= 100, "{ttl}");
    let _: () = redis::cmd("SET")
        .arg("u")
        .arg("v")
        .arg("EX")
        .arg(50)
        .query(&mut far)
        .unwrap();
    let _: String = near.get("u").unwrap();
    let ttl: i64 = redis::cmd("TTL").arg("u").query(&mut near).unwrap();
    assert!(
        ttl > 40 && ttl <= 50,
        "the filled copy keeps the upper tier's expiry: {ttl}"
    );
}

#[test]
fn a_small_lower_cache_still_serves_everything() {
    let (_dir, _upper, lower) = tiers(|config| config.max_keys = Some(10));
    let mut near = lower.client();
    for i in 0..100 {
        let _: () = near.set(format!("k{i}"), i).unwrap();
    }
    for i in 0..100 {
        let v: i64 = near.get(format!("k{i}")).unwrap();
        assert_eq!(v, i);
    }
    assert!(lower.db.cache_snapshot().objects <= 10);
}

#[test]
fn an_unreachable_upstream_is_a_startup_error() {
    let mut config = Config::new(Backend::Upstream {
        url: "redis://127.0.0.1:1".into(),
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime
        .block_on(server::Server::bind(config))
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").contains("cannot reach upstream"),
        "{err:#}"
    );
}
