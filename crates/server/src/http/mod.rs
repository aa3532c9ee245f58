//! `--http ADDR` (also `--metrics-listen ADDR`): the server's HTTP side. `GET /metrics` for
//! Prometheus ([`metrics`]), and a live dashboard at `/`: a static page compiled into the
//! binary ([`assets`]) that polls `GET /api/state` ([`api`]) for the [`sampler`]'s history,
//! the policy engine's status and log, the classes and the cluster, and `GET /api/commands`
//! for the per-command latency panel. With `--http-admin`, the
//! page can also push a policy version, roll back and set parameters ([`admin`]), through
//! the same engine requests as the `POLICY` commands.
//!
//! The routes are axum's; the accept loop is ours, so that idle or slow clients cannot
//! pile up: at most [`MAX_CONNECTIONS`] connections at once (more are answered 503 and
//! closed at once), one request per connection, each done within [`REQUEST_TIMEOUT`]. The
//! page polls rather than holding a stream open, which also keeps it testable with
//! `chromium --dump-dom` (an endless event stream makes it hang).

pub mod admin;
pub mod api;
pub mod assets;
pub mod metrics;
pub mod sampler;

use crate::instance::Instance;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use sampler::History;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// A client that has not sent its request and read the answer by then is dropped.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most connections served at once; more are answered 503 and closed at once, so idle
/// connections cannot pile up tasks and sockets (a scraper needs one, a page two).
pub const MAX_CONNECTIONS: usize = 16;
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// What every handler shares.
pub struct AppState {
    pub instance: Arc<Instance>,
    pub history: Arc<History>,
    /// `--http-admin`: the page may change the policy.
    pub admin: bool,
    /// Held while a wrong password's delay runs, so guesses are serialized server-wide.
    failures: tokio::sync::Mutex<()>,
}

/// Refuses `--http-admin` without what it needs, naming the flag.
pub fn check(config: &crate::config::Config) -> Result<(), String> {
    if config.http_admin {
        if config.metrics_listen.is_none() {
            return Err("--http-admin needs --http ADDR".into());
        }
        if config.requirepass.is_none() {
            return Err(
                "--http-admin needs --requirepass: the page's admin actions are authorized with the server's password"
                    .into(),
            );
        }
    }
    Ok(())
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::script))
        .route("/style.css", get(assets::style))
        .route("/metrics", get(metrics_handler))
        .route("/api/state", get(state_handler))
        .route("/api/commands", get(commands_handler))
        .route("/api/admin/push", post(admin::push))
        .route("/api/admin/use", post(admin::use_version))
        .route("/api/admin/rollback", post(admin::rollback))
        .route("/api/admin/param", post(admin::param))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found; the dashboard is at / and metrics at /metrics\n",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(admin::MAX_BODY_BYTES))
        .with_state(state)
}

async fn metrics_handler(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(&state.instance),
    )
}

async fn commands_handler(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(api::commands(&state.instance)),
    )
}

#[derive(serde::Deserialize)]
pub struct After {
    /// The last sample `seq` the page has; 0 for all that are kept.
    #[serde(default)]
    after: u64,
}

async fn state_handler(
    State(state): State<Arc<AppState>>,
    Query(After { after }): Query<After>,
) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(api::state(
            &state.instance,
            &state.history,
            after,
            state.admin,
        )),
    )
}

/// Serves until `stop` turns true.
pub async fn serve(listener: TcpListener, instance: Arc<Instance>, stop: watch::Receiver<bool>) {
    let history = Arc::new(History::default());
    let sampler = tokio::spawn(sampler::run(
        instance.clone(),
        history.clone(),
        stop.clone(),
    ));
    let state = Arc::new(AppState {
        admin: instance.config.http_admin,
        instance,
        history,
        failures: tokio::sync::Mutex::new(()),
    });
    accept_loop(listener, router(state), stop).await;
    let _ = sampler.await;
}

async fn accept_loop(listener: TcpListener, app: Router, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((socket, _)) = accepted {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Never waits: a full socket buffer just loses the courtesy answer.
                        let _ = socket.try_write(BUSY);
                        continue;
                    };
                    let app = app.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(socket, app)).await;
                        drop(slot);
                    });
                } else {
                    // Out of file descriptors or similar: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

async fn answer(socket: TcpStream, app: Router) {
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_buf_size(admin::MAX_BODY_BYTES.max(8192))
        .serve_connection(TokioIo::new(socket), TowerToHyperService::new(app))
        .await;
}
