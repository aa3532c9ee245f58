//! The dashboard page: static files compiled into the binary, so it works offline and from
//! any install, with no CDN and nothing fetched but `/api/state`.

use axum::http::header;
use axum::response::IntoResponse;

pub const INDEX_HTML: &str = include_str!("assets/index.html");
pub const APP_JS: &str = include_str!("assets/app.js");
pub const STYLE_CSS: &str = include_str!("assets/style.css");

pub async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
}

pub async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
}

pub async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE_CSS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for asset in [INDEX_HTML, APP_JS, STYLE_CSS] {
            assert!(!asset.contains("http://"), "absolute URL in an asset");
            assert!(!asset.contains("https://"), "absolute URL in an asset");
            assert!(!asset.contains("//cdn"), "CDN reference in an asset");
        }
        assert!(INDEX_HTML.contains("src=\"app.js\""));
        assert!(INDEX_HTML.contains("href=\"style.css\""));
    }
}
