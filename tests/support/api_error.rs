//! What a reqwest call of the HTTP tests fails with, and how the gate classifies it: shared
//! by the tests that call a real server (the served simulator, nginx).

use http::{HeaderMap, StatusCode};
use paceline::RateLimited;
use paceline::http::rate_limited_from;

/// An error status with its headers, or no answer at all.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "the transport error is read through Debug, in failure messages"
)]
pub enum ApiError {
    Status {
        status: StatusCode,
        headers: HeaderMap,
    },
    Transport(reqwest::Error),
}

/// 429 and 503 are throttles, with their Retry-After and announced quota.
pub fn classify(error: &ApiError) -> Option<RateLimited> {
    match error {
        ApiError::Status { status, headers } => rate_limited_from(*status, headers),
        ApiError::Transport(_) => None,
    }
}

/// The response, or its error status as an [`ApiError`].
pub fn success(response: reqwest::Response) -> Result<reqwest::Response, ApiError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    Err(ApiError::Status { status, headers })
}
