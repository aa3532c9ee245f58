//! The typed client against one real server (in process, loopback, a temp dir): the log API
//! end to end, concurrent clients racing to start the sequencer, and a client whose epoch
//! goes stale behind its back carrying on without the caller seeing it.

use server::{Backend, Config, Fsync, Server};
use std::collections::HashSet;
use zlog::{Entry, Error, Log};

/// A server on an ephemeral port, run until the test's process ends.
fn start() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.path().to_path_buf(),
        fsync: Fsync::EverySec,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = Server::bind(config).await.unwrap();
            tx.send(server.local_addr()).unwrap();
            server.run(std::future::pending::<()>()).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    (dir, format!("redis://{addr}"))
}

#[test]
fn append_read_fill_trim_and_tail() {
    let (_dir, url) = start();
    let mut log = Log::open(&url, "orders").unwrap();
    assert_eq!(log.layout().replicas(), 2);
    assert_eq!(log.tail().unwrap(), 0);
    let a = log.append(b"first").unwrap();
    let b = log.append(b"second").unwrap();
    assert_eq!((a, b), (0, 1));
    assert_eq!(log.read(a).unwrap(), Entry::Data(b"first".to_vec()));
    assert_eq!(log.tail().unwrap(), 2);
    // A reserved batch, one position of which is never written: a hole, then filled.
    let batch = log.next(3).unwrap();
    assert_eq!((batch.first, batch.count), (2, 3));
    assert!(log
        .write_at(std::time::Instant::now(), batch.epoch, 2, b"x")
        .unwrap());
    assert_eq!(log.read(3).unwrap(), Entry::NotWritten);
    log.fill(3).unwrap();
    log.fill(3).unwrap();
    assert_eq!(log.read(3).unwrap(), Entry::Filled);
    assert!(matches!(log.fill(2), Err(Error::Written)));
    assert_eq!(log.read(2).unwrap(), Entry::Data(b"x".to_vec()));
    log.trim(1).unwrap();
    assert_eq!(log.read(1).unwrap(), Entry::Trimmed);
    log.trim_to(3).unwrap();
    assert_eq!(log.read(0).unwrap(), Entry::Trimmed);
    assert_eq!(log.read(2).unwrap(), Entry::Trimmed);
    assert_eq!(log.read(3).unwrap(), Entry::Filled);
}

#[test]
fn a_half_written_chain_is_completed_by_the_reader() {
    let (_dir, url) = start();
    let mut log = Log::open(&url, "half").unwrap();
    let reserved = log.next(1).unwrap();
    // Only the head replica gets the entry, as if the appender died between the two writes.
    let head = log.layout().chain(reserved.first).next().unwrap();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("ZLOG.WRITE")
        .arg(&head)
        .arg(reserved.epoch)
        .arg(reserved.first)
        .arg("orphan")
        .query(&mut raw)
        .unwrap();
    assert_eq!(
        log.read(reserved.first).unwrap(),
        Entry::Data(b"orphan".to_vec())
    );
    // The tail holds it now: a fill cannot take the position any more.
    assert!(matches!(log.fill(reserved.first), Err(Error::Written)));
}

#[test]
fn clients_racing_to_start_the_sequencer_never_share_a_position() {
    let (_dir, url) = start();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut log = Log::open(&url, "race").unwrap();
                (0..50)
                    .map(|i| {
                        let data = format!("{t}-{i}");
                        (log.append(data.as_bytes()).unwrap(), data)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let appended: Vec<(u64, String)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let positions: HashSet<u64> = appended.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions.len(), appended.len(), "a position given twice");
    let mut log = Log::open(&url, "race").unwrap();
    for (pos, data) in &appended {
        assert_eq!(
            log.read(*pos).unwrap(),
            Entry::Data(data.clone().into_bytes())
        );
    }
}

#[test]
fn a_stale_epoch_is_recovered_without_the_caller_noticing() {
    let (_dir, url) = start();
    let mut log = Log::open(&url, "sealed").unwrap();
    let before = log.append(b"before").unwrap();
    let epoch = log.epoch();
    // Another party seals one object at a newer epoch (as a new sequencer would).
    let object = log.layout().object(1, 0);
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: i64 = redis::cmd("ZLOG.SEAL")
        .arg(&object)
        .arg(epoch + 5)
        .query(&mut raw)
        .unwrap();
    // Positions 1.. land in stripe 1 at once: the append meets -STALE, recovers, succeeds.
    let after = log.append(b"after").unwrap();
    assert!(log.epoch() > epoch + 5, "epoch {}", log.epoch());
    assert!(after > before);
    assert_eq!(log.read(before).unwrap(), Entry::Data(b"before".to_vec()));
    assert_eq!(log.read(after).unwrap(), Entry::Data(b"after".to_vec()));
}
