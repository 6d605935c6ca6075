//! What a policy announces of its quota with each answer, when it is told to
//! ([`Policy::announce_quota`](super::Policy::announce_quota)).

use std::time::Duration;

/// One policy's announcement of its quota, as a real API sends it with every response: how
/// many requests are left, when that count resets, how many a whole window holds and how long
/// a window lasts.
///
/// It is measured when the server judges the request, after counting it if it was accepted,
/// and from that instant, like a Retry-After: the answer then takes `latency_down` to reach
/// the caller, so `resets_in` read on receipt is late by that much (never early).
///
/// How each limit maps onto the four numbers:
///
/// | | fixed window | token bucket |
/// |---|---|---|
/// | `remaining` | the limit minus the requests the current window took (everyone's) | whole tokens in the bucket |
/// | `resets_in` | until the current window ends | until the bucket is full again |
/// | `limit` | the limit | the burst (the bucket's capacity) |
/// | `window` | the window's length | the burst divided by the current rate (the time to fill an empty bucket) |
///
/// While a penalty runs, `remaining` is 0 and `resets_in` is the later of the penalty's end
/// and the limit's own reset (so a client that waits for the reset neither lands in the
/// penalty nor in the full window that started it). A token bucket that the rate schedule
/// never fills again (a rate of zero for good) announces `Duration::MAX` for `resets_in`, and
/// one whose current rate is zero, `Duration::MAX` for `window`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline_sim::{Announced, Policy, Server};
///
/// const SEC: Duration = Duration::from_secs(1);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let api = Server::builder()
///     .global(Policy::fixed_window(100, 10 * SEC).announce_quota(true))
///     .build();
/// // Judged at 50 ms (the default latency), the first request of the window [0, 10 s).
/// let accepted = api.call(None).await.unwrap();
/// assert_eq!(
///     accepted.quota,
///     Some(Announced {
///         remaining: 99,
///         resets_in: Duration::from_millis(9_950),
///         limit: 100,
///         window: 10 * SEC,
///     })
/// );
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Announced {
    /// Requests the policy will still accept before its reset (0 when it is rejecting them).
    pub remaining: u64,
    /// How long until the count resets, measured from the instant the server answered.
    pub resets_in: Duration,
    /// Requests a whole window holds.
    pub limit: u64,
    /// How long a window lasts.
    pub window: Duration,
}

impl Announced {
    /// The tightest of some announcements: the one with the fewest requests remaining, and
    /// of those, the one that resets last (the first of equals). `None` if there are none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::Announced;
    ///
    /// let quota = |remaining, resets_in| Announced {
    ///     remaining,
    ///     resets_in: Duration::from_secs(resets_in),
    ///     limit: 10,
    ///     window: Duration::from_secs(60),
    /// };
    /// assert_eq!(Announced::tightest([quota(3, 5), quota(2, 50)]), Some(quota(2, 50)));
    /// assert_eq!(Announced::tightest([quota(2, 50), quota(2, 5)]), Some(quota(2, 50)));
    /// assert_eq!(Announced::tightest([]), None);
    /// ```
    pub fn tightest(quotas: impl IntoIterator<Item = Self>) -> Option<Self> {
        quotas.into_iter().reduce(|tightest, q| {
            let key = |q: &Self| (q.remaining, std::cmp::Reverse(q.resets_in));
            if key(&q) < key(&tightest) {
                q
            } else {
                tightest
            }
        })
    }
}
