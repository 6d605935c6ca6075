//! The server's answers to our requests.

use std::fmt;
use std::time::Duration;

use super::announce::Announced;
use super::log::Limit;

/// The server accepted the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The request's number: ours are numbered from 0 in the order they were sent (see
    /// [`Request::number`](super::Request::number) in the server's [`Log`](super::Log)).
    pub request: u64,
    /// The quota the server announced with this answer, if its policies
    /// [announce it](super::Policy::announce_quota), counting this request: the
    /// [tightest](Announced::tightest) of [`quotas`](Self::quotas), which is what a client that
    /// reads one announcement should go by.
    pub quota: Option<Announced>,
    /// Each announcing policy's announcement: the server's global policy's
    /// ([`Limit::Global`]) first, then, if the request named a scope and the server has
    /// [scope policies](super::ServerBuilder::per_scope), its scope's ([`Limit::Scope`]).
    /// Empty if no policy announces.
    pub quotas: Vec<(Limit, Announced)>,
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
    /// The quota the server announced with this answer, as in [`Accepted::quota`]. If an
    /// announcing policy rejected the request, `remaining` is 0 (that policy has none left,
    /// and announces a `resets_in` no earlier than its Retry-After).
    pub quota: Option<Announced>,
    /// Each announcing policy's announcement, as in [`Accepted::quotas`]: a policy that did
    /// not reject the request announces what it really has left.
    pub quotas: Vec<(Limit, Announced)>,
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
            quota: None,
            quotas: Vec::new(),
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
