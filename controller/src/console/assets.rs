//! The console's files, embedded in the binary: its own script and style, and uPlot
//! (vendored from the npm registry, MIT, `assets/vendor/uplot/`).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

use super::layout::refusal;

/// (name, content type, bytes).
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/console/console.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/vendor/uplot/uPlot.min.css"),
    ),
];

pub async fn serve(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, bytes)) => (
            [
                (CONTENT_TYPE, *content_type),
                (CACHE_CONTROL, "public, max-age=300"),
            ],
            *bytes,
        )
            .into_response(),
        None => refusal(StatusCode::NOT_FOUND, "not_found", "no such file"),
    }
}
