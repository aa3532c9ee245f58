//! Shared by the integration tests: a real server on an ephemeral loopback port, run on its
//! own Tokio runtime in a background thread, shut down (and its data removed) on drop.

#![allow(dead_code)]

use server::{Backend, Config, Fsync, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct TestServer {
    pub addr: SocketAddr,
    pub db: server::db::Db,
    /// The Prometheus endpoint, when the config asked for one.
    pub metrics_addr: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    /// A server storing in `dir`, with `tweak` applied to the default config.
    pub fn rocks(dir: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = Config::new(Backend::RocksDb {
            data_dir: dir.to_path_buf(),
            fsync: Fsync::EverySec,
        });
        config.listen = "127.0.0.1:0".parse().unwrap();
        tweak(&mut config);
        TestServer::start(config)
    }

    pub fn start(config: Config) -> TestServer {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let server = match Server::bind(config).await {
                    Ok(server) => server,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Ok((
                    server.local_addr(),
                    server.db(),
                    server.metrics_addr(),
                )));
                server
                    .run(async {
                        let _ = stop_rx.await;
                    })
                    .await
            })
        });
        let (addr, db, metrics_addr) = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server did not start")
            .expect("server failed to start");
        TestServer {
            addr,
            db,
            metrics_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    pub fn raw(&self) -> RawClient {
        RawClient::connect(self.addr)
    }

    /// Stops the server (draining connections, syncing the store) and reports its result.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread.join().expect("server thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// A plain TCP client that sends exact bytes and reads raw replies.
pub struct RawClient {
    pub stream: TcpStream,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        RawClient { stream }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads until `n` bytes arrived, the server closed, or the timeout.
    pub fn read_exact_len(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut out[got..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        out.truncate(got);
        out
    }

    /// Reads one line (through CRLF).
    pub fn line(&mut self) -> String {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            match self.stream.read(&mut byte) {
                Ok(1) => line.push(byte[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&line).into_owned()
    }

    /// Whether the server has closed this connection (reads EOF or reset within the timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                }
            }
        }
    }
}

/// A RESP multibulk request.
pub fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Deterministic pseudo-random bytes (splitmix64), so a failing case can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A program from the distribution's Redis packages, or `None` with a message saying the
/// test that needed it is skipped.
pub fn redis_tool(name: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: `{name}` is not installed (Debian package redis-tools / redis-server)"
        );
    }
    found
}
