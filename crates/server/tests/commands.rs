//! Every command through a real client library (`redis` crate) against a real server.

mod common;

use common::{request, TestServer};
use redis::{Commands, Value};

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

#[test]
fn strings_round_trip_with_conditions() {
    let (_dir, server) = server();
    let mut c = server.client();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let echo: String = redis::cmd("ECHO").arg("héllo").query(&mut c).unwrap();
    assert_eq!(echo, "héllo");

    let _: () = c.set("k", b"\x00binary\r\nvalue".as_slice()).unwrap();
    let value: Vec<u8> = c.get("k").unwrap();
    assert_eq!(value, b"\x00binary\r\nvalue");
    let missing: Option<String> = c.get("nope").unwrap();
    assert_eq!(missing, None);

    let nx: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("x")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(nx, None, "NX on an existing key writes nothing");
    let xx: Option<String> = redis::cmd("SET")
        .arg("new")
        .arg("x")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(xx, None, "XX on a missing key writes nothing");
    let nx: Option<String> = redis::cmd("SET")
        .arg("new")
        .arg("1")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(nx.as_deref(), Some("OK"));
    let xx: Option<String> = redis::cmd("SET")
        .arg("new")
        .arg("2")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(xx.as_deref(), Some("OK"));
    let value: String = c.get("new").unwrap();
    assert_eq!(value, "2");

    let _: () = redis::cmd("MSET")
        .arg(&["a", "1", "b", "2", "a", "3"])
        .query(&mut c)
        .unwrap();
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["a", "b", "zz"])
        .query(&mut c)
        .unwrap();
    assert_eq!(values, vec![Some("3".into()), Some("2".into()), None]);
    let n: i64 = redis::cmd("EXISTS")
        .arg(&["a", "a", "zz"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 4, "k, new, a, b");
    let n: i64 = redis::cmd("DEL")
        .arg(&["a", "zz", "a"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 3);
    let gone: Option<String> = c.get("a").unwrap();
    assert_eq!(gone, None);
}

#[test]
fn expiry_is_kept_and_enforced() {
    let (_dir, server) = server();
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("v")
        .arg("PX")
        .arg(150)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("long")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg("t").query(&mut c).unwrap();
    assert!(pttl > 0 && pttl <= 150, "{pttl}");
    let ttl: i64 = redis::cmd("TTL").arg("long").query(&mut c).unwrap();
    assert!(ttl > 90 && ttl <= 100, "{ttl}");
    let ttl: i64 = redis::cmd("TTL").arg("k").query(&mut c).unwrap();
    assert_eq!(ttl, -2);
    let _: () = c.set("plain", "v").unwrap();
    let ttl: i64 = redis::cmd("TTL").arg("plain").query(&mut c).unwrap();
    assert_eq!(ttl, -1);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let expired: Option<String> = c.get("t").unwrap();
    assert_eq!(expired, None);
    let n: i64 = redis::cmd("EXISTS").arg("t").query(&mut c).unwrap();
    assert_eq!(n, 0);
    let err = redis::cmd("SET")
        .arg("t")
        .arg("v")
        .arg("EX")
        .arg(0)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("invalid expire time"), "{err}");
}

#[test]
fn errors_are_redis_style_and_the_connection_stays_usable() {
    let (_dir, server) = server();
    let mut c = server.client();
    let err = redis::cmd("FLUSHX").query::<()>(&mut c).unwrap_err();
    assert!(
        err.to_string().contains("unknown command 'FLUSHX'"),
        "{err}"
    );
    let err = redis::cmd("GET").query::<()>(&mut c).unwrap_err();
    assert!(
        err.to_string()
            .contains("wrong number of arguments for 'get' command"),
        "{err}"
    );
    let err = redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap_err();
    assert!(
        err.to_string().contains("DB index is out of range"),
        "{err}"
    );
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    let err = redis::cmd("AUTH")
        .arg("pw")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string().contains("without any password configured"),
        "{err}"
    );
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn client_names_info_config_and_command() {
    let (_dir, server) = server();
    let mut c = server.client();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tester")
        .query(&mut c)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
    assert_eq!(name, "tester");

    let _: () = c.set("k", "v").unwrap();
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for needle in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Memory",
        "# Keyspace",
        "# Cache",
        "connected_clients:1",
        "db0:keys=1",
        "cache_algorithm:lru",
        &format!("tcp_port:{}", server.addr.port()),
    ] {
        assert!(info.contains(needle), "INFO lacks {needle}:\n{info}");
    }
    let only: String = redis::cmd("INFO").arg("cache").query(&mut c).unwrap();
    assert!(
        only.starts_with("# Cache") && !only.contains("# Server"),
        "{only}"
    );

    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max*")
        .query(&mut c)
        .unwrap();
    assert!(got.windows(2).any(|w| w[0] == "maxmemory"), "{got:?}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("max-keys")
        .arg("1000")
        .query(&mut c)
        .unwrap();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max-keys")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec!["max-keys", "1000"]);
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("5")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("immutable"), "{err}");
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("nope")
        .arg("1")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("Unknown option"), "{err}");
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec!["save", ""]);

    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    let all: Vec<Value> = redis::cmd("COMMAND").query(&mut c).unwrap();
    assert_eq!(all.len() as i64, count);
    assert!(count >= 19);
}

#[test]
fn cache_stats_and_resize_evict_but_never_lose_data() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| config.max_keys = Some(50));
    let mut c = server.client();
    for i in 0..500 {
        let _: () = c.set(format!("key:{i}"), format!("value:{i}")).unwrap();
    }
    let stats: std::collections::HashMap<String, Value> =
        redis::cmd("CACHE").arg("STATS").query(&mut c).unwrap();
    let int = |name: &str| match &stats[name] {
        Value::Int(n) => *n,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(int("objects"), 50);
    assert_eq!(int("capacity_objects"), 50);
    assert_eq!(int("evictions"), 450);
    // Every key is still readable: the evicted ones come back from RocksDB.
    for i in 0..500 {
        let value: String = c.get(format!("key:{i}")).unwrap();
        assert_eq!(value, format!("value:{i}"));
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 500);
    let evicted: i64 = redis::cmd("CACHE")
        .arg("RESIZE")
        .arg("10")
        .query(&mut c)
        .unwrap();
    assert_eq!(evicted, 40);
    assert_eq!(server.db.cache_snapshot().objects, 10);
    let err = redis::cmd("CACHE")
        .arg("RESIZE")
        .arg("lots")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("invalid size"), "{err}");
}

#[test]
fn hints_name_the_class_of_cached_values() {
    let (_dir, server) = server();
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg("h")
        .arg("v")
        .arg("HINT")
        .arg("metadata")
        .query(&mut c)
        .unwrap();
    assert_eq!(server.db.cached_class(b"h").as_deref(), Some("metadata"));
    let _: () = c.set("p", "v").unwrap();
    assert_eq!(server.db.cached_class(b"p"), None);
}

#[test]
fn resp3_after_hello_3() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    raw.send(&request(&[b"GET", b"missing"]));
    assert_eq!(raw.line(), "$-1\r\n");
    raw.send(&request(&[b"HELLO", b"3"]));
    assert_eq!(raw.line(), "%7\r\n", "HELLO 3 answers with a RESP3 map");
    let mut map = Vec::new();
    for _ in 0..14 {
        let line = raw.line();
        if line.starts_with('$') {
            map.push(raw.line().trim_end().to_string());
        } else if line.starts_with('*') {
            map.push("[]".to_string());
        } else {
            map.push(line.trim_end().to_string());
        }
    }
    assert_eq!(&map[4..6], &[String::from("proto"), String::from(":3")]);
    raw.send(&request(&[b"GET", b"missing"]));
    assert_eq!(raw.line(), "_\r\n", "RESP3 null");
    raw.send(&request(&[b"HELLO", b"4"]));
    assert!(raw.line().starts_with("-NOPROTO"));
}

#[test]
fn requirepass_gates_everything() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| {
        config.requirepass = Some("s3cret".into())
    });
    let mut raw = server.raw();
    raw.send(&request(&[b"GET", b"k"]));
    assert_eq!(raw.line(), "-NOAUTH Authentication required.\r\n");
    raw.send(&request(&[b"AUTH", b"wrong"]));
    assert!(raw.line().starts_with("-WRONGPASS"));
    // Before authenticating, requests are held to tiny limits.
    raw.send(b"*1\r\n$100000\r\n");
    assert_eq!(raw.line(), "-ERR Protocol error: invalid bulk length\r\n");
    assert!(raw.is_closed());

    let mut raw = server.raw();
    raw.send(&request(&[b"AUTH", b"default", b"s3cret"]));
    assert_eq!(raw.line(), "+OK\r\n");
    raw.send(&request(&[b"SET", b"k", b"v"]));
    assert_eq!(raw.line(), "+OK\r\n");

    let url = format!("redis://:s3cret@{}", server.addr);
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let v: String = redis::Commands::get(&mut c, "k").unwrap();
    assert_eq!(v, "v");
}

#[test]
fn data_survives_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = TestServer::rocks(dir.path(), |_| {});
        let mut c = server.client();
        for i in 0..100 {
            let _: () = c.set(format!("k{i}"), i).unwrap();
        }
        let _: () = redis::cmd("SET")
            .arg("ttl")
            .arg("v")
            .arg("EX")
            .arg(1000)
            .query(&mut c)
            .unwrap();
        server.shutdown().unwrap();
    }
    let server = TestServer::rocks(dir.path(), |_| {});
    let mut c = server.client();
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 101);
    for i in 0..100 {
        let v: i64 = c.get(format!("k{i}")).unwrap();
        assert_eq!(v, i);
    }
    let ttl: i64 = redis::cmd("TTL").arg("ttl").query(&mut c).unwrap();
    assert!(ttl > 900, "the expiry is stored with the value: {ttl}");
}

/// `mantle policy push` (`server::admin::push_policy`) talks to the server over the server's
/// own RESP client: the new version on success, the server's message on a refusal, the
/// password taken from a `redis://` address, and a clear error when nothing listens.
#[test]
fn policy_push_loads_versions_and_reports_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| config.requirepass = Some("pw".into()));
    let source = "function howmuch()\n  return {capacity = 100}\nend\n";
    let url = format!("redis://:pw@{}", server.addr);
    assert_eq!(
        server::admin::push_policy(&url, "shrink", source, "ops").unwrap(),
        1
    );
    assert_eq!(
        server::admin::push_policy(&url, "shrink", source, "ops").unwrap(),
        2
    );
    let refused = server::admin::push_policy(&url, "bad", "function (", "ops").unwrap_err();
    assert!(!format!("{refused:#}").starts_with("ERR"), "{refused:#}");
    let unauthenticated =
        server::admin::push_policy(&server.addr.to_string(), "shrink", source, "ops").unwrap_err();
    assert!(
        format!("{unauthenticated:#}").contains("Authentication required"),
        "{unauthenticated:#}"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap().to_string();
    drop(listener);
    let unreachable = server::admin::push_policy(&closed, "shrink", source, "ops").unwrap_err();
    assert!(
        format!("{unreachable:#}").contains("cannot connect"),
        "{unreachable:#}"
    );
}
