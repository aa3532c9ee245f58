//! The page's admin actions (`--http-admin`): push a policy version, use a version, roll
//! back, set a parameter. Each is one request to the policy engine, exactly what the
//! `POLICY LOAD|USE|ROLLBACK|PARAM` commands send, so the registry, the log and the checks
//! are the same. Every action needs the server's password (`--requirepass`), in an
//! `X-Mantle-Password` header or as HTTP basic auth, compared in constant time; a wrong one
//! costs [`FAILURE_DELAY`], served one at a time server-wide, and counts in
//! `mantle_auth_failures_total`. Bodies are JSON, which a cross-site form cannot send.

use super::AppState;
use crate::live::Op;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body: a policy source at its limit, escaped as JSON.
pub const MAX_BODY_BYTES: usize = 2 * crate::live::registry::MAX_SOURCE_BYTES + 4096;
/// Wait before answering a wrong password.
pub const FAILURE_DELAY: Duration = Duration::from_millis(250);
/// The header the page sends the password in.
pub const PASSWORD_HEADER: &str = "x-mantle-password";

/// Who sent an authorized request, for the policy log's `author`.
struct Admin(String);

/// The password from the header or basic auth, with the user name given, if any.
fn credentials(headers: &HeaderMap) -> Option<(Option<String>, Vec<u8>)> {
    if let Some(value) = headers.get(PASSWORD_HEADER) {
        return Some((None, value.as_bytes().to_vec()));
    }
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8_lossy(&decoded[..colon]).into_owned();
    Some((Some(user), decoded[colon + 1..].to_vec()))
}

async fn authorize(state: &AppState, headers: &HeaderMap) -> Result<Admin, Response> {
    if !state.admin {
        return Err(error(
            StatusCode::FORBIDDEN,
            "the dashboard is read-only; start the server with --http-admin to change policies from it",
        ));
    }
    let instance = &state.instance;
    if let Some((user, password)) = credentials(headers) {
        let expected = instance.config.requirepass.as_deref().unwrap_or_default();
        if instance.requires_auth()
            && crate::cmd::auth::password_matches(expected.as_bytes(), &password)
        {
            let who = user.filter(|u| !u.is_empty() && u != "default");
            return Ok(Admin(match who {
                Some(user) => format!("dashboard ({user})"),
                None => "dashboard".into(),
            }));
        }
        instance
            .guards()
            .auth_failures
            .fetch_add(1, Ordering::Relaxed);
        let _serial = state.failures.lock().await;
        tokio::time::sleep(FAILURE_DELAY).await;
        return Err(error(StatusCode::UNAUTHORIZED, "wrong password"));
    }
    Err(error(
        StatusCode::UNAUTHORIZED,
        "the server's password is required (X-Mantle-Password header or basic auth)",
    ))
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// Runs `op` and answers with the engine's reply; an error reply is a 400.
async fn run(state: &AppState, op: Op) -> Response {
    let reply = state.instance.live.request(op).await;
    // The page shows the outcome in the log at once, not a second later.
    state.history.refresh_policy(&state.instance).await;
    match reply {
        Err(e) => error(StatusCode::BAD_REQUEST, &e),
        Ok(reply) => Json(json!({ "ok": reply })).into_response(),
    }
}

#[derive(Deserialize)]
pub struct Push {
    name: String,
    source: String,
}

pub async fn push(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Json(body): Json<Push>,
) -> Response {
    let Admin(author) = match authorize(&state, &headers).await {
        Ok(admin) => admin,
        Err(refusal) => return refusal,
    };
    let op = Op::Load {
        name: body.name,
        source: body.source,
        author,
    };
    run(&state, op).await
}

#[derive(Deserialize)]
pub struct UseVersion {
    name: String,
    version: Option<u32>,
}

pub async fn use_version(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Json(body): Json<UseVersion>,
) -> Response {
    if let Err(refusal) = authorize(&state, &headers).await {
        return refusal;
    }
    let op = Op::Use {
        name: body.name,
        version: body.version,
    };
    run(&state, op).await
}

pub async fn rollback(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authorize(&state, &headers).await {
        return refusal;
    }
    run(&state, Op::Rollback).await
}

#[derive(Deserialize)]
pub struct Param {
    key: String,
    value: String,
}

pub async fn param(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Json(body): Json<Param>,
) -> Response {
    if let Err(refusal) = authorize(&state, &headers).await {
        return refusal;
    }
    let op = Op::Param {
        key: body.key,
        value: body.value,
    };
    run(&state, op).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_the_header_or_basic_auth() {
        let mut headers = HeaderMap::new();
        assert!(credentials(&headers).is_none());
        headers.insert("authorization", "Basic b3BzOnMzY3I6ZXQ=".parse().unwrap());
        assert_eq!(
            credentials(&headers),
            Some((Some("ops".into()), b"s3cr:et".to_vec()))
        );
        headers.insert("authorization", "Bearer x".parse().unwrap());
        assert!(credentials(&headers).is_none());
        headers.insert(PASSWORD_HEADER, "pw".parse().unwrap());
        assert_eq!(credentials(&headers), Some((None, b"pw".to_vec())));
    }
}
