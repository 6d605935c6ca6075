//! What the user's classifier says of an error: whether it means "rate-limited", for how long
//! and for which scope.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A scope a backoff can apply to, such as one account under a developer token.
///
/// Cheap to clone. Built from a `&str` or a `String`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope(Arc<str>);

impl Scope {
    /// The scope's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Scope {
    fn from(name: &str) -> Self {
        Scope(name.into())
    }
}

impl From<String> for Scope {
    fn from(name: String) -> Self {
        Scope(name.into())
    }
}

/// The classifier's answer for an error that means "rate-limited": the server said to slow
/// down, maybe for how long and maybe for which scope.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline::{Gate, RateLimited};
///
/// # #[derive(Debug)]
/// struct ApiError { status: u16, retry_after_secs: Option<u64>, account: Option<String> }
///
/// let gate = Gate::builder(|e: &ApiError| {
///     if e.status != 429 {
///         return None; // any other error reaches the caller at once
///     }
///     let mut limited = RateLimited::new();
///     if let Some(secs) = e.retry_after_secs {
///         limited = limited.retry_after(Duration::from_secs(secs));
///     }
///     if let Some(account) = &e.account {
///         limited = limited.scope(account.as_str()); // only this account's calls wait
///     }
///     Some(limited)
/// })
/// .build()
/// .unwrap();
/// # drop(gate);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimited {
    pub(crate) retry_after: Option<Duration>,
    pub(crate) scope: Option<Scope>,
    pub(crate) quota: Option<super::quota::Quota>,
}

impl RateLimited {
    /// Rate-limited, with no Retry-After, for the whole gate: the gate picks the backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// The server said how long to wait. A wait longer than the crate's maximum (one year)
    /// is taken as that maximum.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The limit applies to one scope only; calls outside it carry on.
    pub fn scope(mut self, scope: impl Into<Scope>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The throttle's response also announced the server's quota: the gate takes it in as
    /// [`Gate::observe`](crate::Gate::observe) does.
    pub fn quota(mut self, quota: super::quota::Quota) -> Self {
        self.quota = Some(quota);
        self
    }
}
