//! The server's answers to our requests.

use std::fmt;
use std::time::Duration;

/// The server accepted the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The request's number: ours are numbered from 0 in the order they were sent (see
    /// [`Request::number`](super::Request::number) in the server's [`Log`](super::Log)).
    pub request: u64,
}

/// The server rejected the request for its rate limit (think HTTP 429 or
/// `RESOURCE_EXHAUSTED`).
///
/// Its `Display` reads like a server's message, e.g. `throttled by the server (scope "acct-1");
/// retry after 15s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// How long to wait before trying again, if the server says so. Measured, like an HTTP
    /// Retry-After, from the moment the server answered; the answer takes `latency_down` to
    /// reach the caller, so a caller that counts it from receipt waits that much longer than
    /// needed (never less).
    pub retry_after: Option<Duration>,
    /// The scope whose limit was hit, or `None` if it was the server's global limit (which
    /// holds back every scope).
    pub scope: Option<String>,
    /// The request's number, as in [`Accepted::request`].
    pub request: u64,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("throttled by the server")?;
        if let Some(scope) = &self.scope {
            write!(f, " (scope {scope:?})")?;
        }
        if let Some(retry_after) = self.retry_after {
            write!(f, "; retry after {retry_after:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejected {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_scope_and_retry_after_when_given() {
        let mut t = Rejected {
            retry_after: None,
            scope: None,
            request: 0,
        };
        assert_eq!(t.to_string(), "throttled by the server");
        t.scope = Some("acct-1".into());
        t.retry_after = Some(Duration::from_secs(15));
        assert_eq!(
            t.to_string(),
            r#"throttled by the server (scope "acct-1"); retry after 15s"#
        );
    }
}
