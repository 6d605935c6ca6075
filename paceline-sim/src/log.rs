//! The server's record of every request it saw, and the analyses a test checks it with.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use tokio::time::Instant;

/// One request as the server saw it (and, for ours, as the caller saw it).
///
/// Requests from [other clients](super::OtherClients) have `ours == false` and only the
/// server's side: no number, no `sent`, no `answered`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Whether it is one of ours (sent through [`Server::call`](super::Server::call)).
    pub ours: bool,
    /// Ours are numbered from 0 in the order they were sent.
    pub number: Option<u64>,
    /// The scope the request named.
    pub scope: Option<String>,
    /// When the caller sent it (the first poll of the call's future).
    pub sent: Option<Instant>,
    /// When it reached the server, which judged it at that instant.
    pub arrived: Instant,
    /// When the answer reached the caller; `None` if the call's future was dropped before, or
    /// the answer is still on its way.
    pub answered: Option<Instant>,
    /// How many of our requests had been sent when the answer reached the caller: those
    /// numbered from this value on were sent by a caller that could know the answer. (It
    /// orders events of the same instant, which instants alone cannot.)
    pub sends_before_answer: Option<u64>,
    /// Accepted or rejected, and why.
    pub outcome: Outcome,
    /// The Retry-After the answer carried.
    pub retry_after: Option<Duration>,
}

impl Request {
    /// Whether the server accepted it.
    pub fn is_accepted(&self) -> bool {
        self.outcome == Outcome::Accepted
    }

    /// Whether it arrived while a penalty was running (and was rejected for it).
    pub fn in_penalty(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Rejected {
                in_penalty: true,
                ..
            }
        )
    }
}

/// What the server did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted: it used one unit of every limit it was checked against.
    Accepted,
    /// Rejected, using no capacity.
    Rejected {
        /// Which limit rejected it.
        by: Limit,
        /// Whether it arrived while that limit's penalty was running (so it restarted the
        /// penalty, longer); otherwise the limit had no room (which may have started a
        /// penalty).
        in_penalty: bool,
    },
}

/// Which of a server's limits a rejection came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The server's global limit.
    Global,
    /// The limit of the request's scope.
    Scope,
}

/// Which requests an analysis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Our accepted requests.
    OursAccepted,
    /// All our requests that reached the server, accepted or not.
    OursArrived,
    /// Accepted requests, ours and other clients'.
    AllAccepted,
    /// Every request that reached the server.
    AllArrived,
}

impl Which {
    fn counts(self, request: &Request) -> bool {
        match self {
            Self::OursAccepted => request.ours && request.is_accepted(),
            Self::OursArrived => request.ours,
            Self::AllAccepted => request.is_accepted(),
            Self::AllArrived => true,
        }
    }
}

/// A snapshot of the requests a [`Server`](super::Server) saw, in the order they arrived, with
/// the analyses a test asserts on.
///
/// Windows here are half-open, like the server's: a window of length `w` starting at `t` holds
/// arrivals in `[t, t + w)`, so two requests exactly `w` apart are never in one window.
///
/// # Examples
///
/// A log can be made by hand, e.g. to check what a test asserts:
///
/// ```
/// use std::time::Duration;
/// use paceline_sim::{Log, Outcome, Request, Which};
/// use tokio::time::Instant;
///
/// let start = Instant::now();
/// let at = |ms| Request {
///     ours: true,
///     number: None,
///     scope: None,
///     sent: None,
///     arrived: start + Duration::from_millis(ms),
///     answered: None,
///     sends_before_answer: None,
///     outcome: Outcome::Accepted,
///     retry_after: None,
/// };
/// let log = Log::new(start, vec![at(0), at(900), at(1_000), at(1_100), at(2_000)]);
/// let sec = Duration::from_secs(1);
/// // [900, 1900) holds 3 arrivals; no window of a second holds more.
/// assert_eq!(log.max_in_window(sec, Which::OursArrived), 3);
/// // Against a limit of 2 per second, one arrival (at 1100) was one too many.
/// assert_eq!(log.over_limit(sec, 2, Which::OursArrived), 1);
/// // Counted in aligned windows [0, 1000), [1000, 2000), …, none holds more than 2.
/// assert_eq!(log.fixed_windows_over(sec, Duration::ZERO, 2, Which::OursArrived), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    start: Instant,
    requests: Vec<Request>,
}

impl Log {
    /// A log of `requests` on a server started at `start`, ordered by arrival (requests arriving
    /// at the same instant keep their order).
    pub fn new(start: Instant, mut requests: Vec<Request>) -> Self {
        requests.sort_by_key(|r| r.arrived);
        Self { start, requests }
    }

    /// The server's start, which fixed windows and rate schedules count from.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Every request, in the order of arrival; at the same instant, other clients' come
    /// before ours (as the server judged them).
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Our requests, in the order of arrival.
    pub fn ours(&self) -> impl Iterator<Item = &Request> + '_ {
        self.requests.iter().filter(|r| r.ours)
    }

    /// The requests (ours and others') naming `scope` (`None`: naming none), as a log of
    /// their own.
    pub fn in_scope(&self, scope: Option<&str>) -> Log {
        let requests = self
            .requests
            .iter()
            .filter(|r| r.scope.as_deref() == scope)
            .cloned();
        Log {
            start: self.start,
            requests: requests.collect(),
        }
    }

    /// How many of ours were accepted.
    pub fn accepted(&self) -> usize {
        self.ours().filter(|r| r.is_accepted()).count()
    }

    /// How many of ours were rejected (for any reason, a penalty included).
    pub fn rejected(&self) -> usize {
        self.ours().filter(|r| !r.is_accepted()).count()
    }

    /// How many of ours arrived while a penalty was running.
    pub fn in_penalty(&self) -> usize {
        self.ours().filter(|r| r.in_penalty()).count()
    }

    /// How many requests came from other clients (accepted or not).
    pub fn others(&self) -> usize {
        self.requests.len() - self.ours().count()
    }

    /// The most arrivals counted by `which` in any window of length `window`, whatever its
    /// phase (an exact sliding-window maximum).
    pub fn max_in_window(&self, window: Duration, which: Which) -> usize {
        let arrivals = self.arrivals(which);
        let mut end = 0;
        let mut most = 0;
        for (i, &first) in arrivals.iter().enumerate() {
            while end < arrivals.len() && arrivals[end] < first + window {
                end += 1;
            }
            most = most.max(end - i);
        }
        most
    }

    /// How many arrivals counted by `which` were over `limit` per `window`: those at an instant
    /// `t` where the window `(t - window, t]` holds more than `limit` arrivals up to and
    /// including this one (so `limit + 1` arrivals in one window make one over the limit).
    /// Zero means no window of any phase held more than `limit`.
    pub fn over_limit(&self, window: Duration, limit: usize, which: Which) -> usize {
        let arrivals = self.arrivals(which);
        (0..arrivals.len())
            .filter(|&i| i >= limit && arrivals[i] - arrivals[i - limit] < window)
            .count()
    }

    /// How many of the aligned windows `[start + phase + k·window, start + phase + (k+1)·window)`
    /// (a fixed-window server's) hold more than `limit` arrivals counted by `which`.
    ///
    /// # Panics
    ///
    /// If `window` is zero.
    #[track_caller]
    pub fn fixed_windows_over(
        &self,
        window: Duration,
        phase: Duration,
        limit: usize,
        which: Which,
    ) -> usize {
        assert!(!window.is_zero(), "`window` must be longer than zero");
        let (window, phase) = (window.as_nanos(), phase.as_nanos() % window.as_nanos());
        let mut counts: HashMap<u128, usize> = HashMap::new();
        for at in self.arrivals(which) {
            let offset = at.saturating_duration_since(self.start).as_nanos();
            *counts
                .entry((offset + window - phase) / window)
                .or_default() += 1;
        }
        counts.values().filter(|&&n| n > limit).count()
    }

    /// How many of ours were sent *into a known penalty*: sent while the caller already had a
    /// throttle answer (delivered before the send) whose Retry-After had not yet run out at the
    /// send instant, counted on the server's clock (`arrived + retry_after` of that answer)
    /// and for a limit covering the request (the global limit covers all; a scope's, its
    /// own scope).
    ///
    /// On a server with a penalty, every Retry-After is a penalty's end, and a well-behaved
    /// caller scores zero here. Without a penalty it counts sends before the limit said it
    /// had room. Answers without a Retry-After tell nothing and are not counted.
    pub fn sent_into_known_penalty(&self) -> usize {
        let mut ours: Vec<(u64, Instant, Option<&str>)> = self
            .ours()
            .filter_map(|r| Some((r.number?, r.sent?, r.scope.as_deref())))
            .collect();
        ours.sort_by_key(|&(number, ..)| number);

        // Throttles the caller received: (sends before delivery, end, scope they cover).
        let mut known: Vec<(u64, Instant, Option<&str>)> = self
            .ours()
            .filter_map(|r| match r.outcome {
                Outcome::Rejected { by, .. } => {
                    let covers = match by {
                        Limit::Global => None,
                        Limit::Scope => Some(r.scope.as_deref()?),
                    };
                    Some((r.sends_before_answer?, r.arrived + r.retry_after?, covers))
                }
                Outcome::Accepted => None,
            })
            .collect();
        known.sort_by_key(|&(sends_before, ..)| sends_before);

        let mut global_end: Option<Instant> = None;
        let mut scope_end: HashMap<&str, Instant> = HashMap::new();
        let mut next = known.iter().peekable();
        let mut count = 0;
        for (number, sent, scope) in ours {
            while let Some(&&(_, end, covers)) = next.peek().filter(|k| k.0 <= number) {
                match covers {
                    None => global_end = global_end.max(Some(end)),
                    Some(s) => {
                        let e = scope_end.entry(s).or_insert(end);
                        *e = (*e).max(end);
                    }
                }
                next.next();
            }
            let scoped = scope.and_then(|s| scope_end.get(s).copied());
            if global_end.max(scoped).is_some_and(|end| sent < end) {
                count += 1;
            }
        }
        count
    }

    /// Writes the log as CSV, one row per request in the order of arrival, for plots and
    /// analyses of your own (a spreadsheet, pandas, gnuplot).
    ///
    /// The first line is the header [`Log::CSV_HEADER`]; then each request, with these
    /// columns:
    ///
    /// | column | what | when empty |
    /// |---|---|---|
    /// | `arrived_s` | when it reached the server, which judged it then | never |
    /// | `ours` | `true` for ours, `false` for [other clients'](super::OtherClients) | never |
    /// | `number` | ours are numbered from 0 in the order they were sent | others' |
    /// | `scope` | the scope it named | it named none |
    /// | `outcome` | `accepted` or `rejected` | never |
    /// | `limit` | which limit rejected it: `global` or `scope` | accepted |
    /// | `in_penalty` | `true` if it arrived while that limit's penalty ran | accepted |
    /// | `retry_after_s` | the Retry-After its answer carried | none carried |
    /// | `sent_s` | when the caller sent it | others' |
    /// | `answered_s` | when its answer reached the caller | others', dropped calls' and answers still on their way |
    /// | `sends_before_answer` | how many of ours had been sent when its answer arrived | as `answered_s` |
    ///
    /// Times (`_s`) are seconds since [`Log::start`], exact to the nanosecond (`12.050000000`);
    /// an instant before the start (in a log made by hand) is written with a minus sign.
    /// A scope holding a comma, a double quote or a line break is quoted as RFC 4180 says
    /// (`"a,""b"""`), and so is a scope that is the empty string (`""`), so that it differs
    /// from none.
    ///
    /// Each field is written on its own: give a file through a [`std::io::BufWriter`].
    ///
    /// # Errors
    ///
    /// Whatever error `out` returns; the rows written before it are in `out`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::{Log, Policy, Server};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> std::io::Result<()> {
    /// let api = Server::builder()
    ///     .global(Policy::fixed_window(1, Duration::from_secs(1)))
    ///     .build();
    /// let _ = api.call(Some("acct-1")).await;
    /// let _ = api.call(None).await;
    ///
    /// let mut csv = Vec::new();
    /// api.log().write_csv(&mut csv)?;
    /// let csv = String::from_utf8(csv).unwrap();
    /// let lines: Vec<_> = csv.lines().collect();
    /// assert_eq!(lines[0], Log::CSV_HEADER);
    /// // Sent at 0, judged at 50 ms, answered at 100 ms; then sent at 100 ms, judged at
    /// // 150 ms in the same window, and told to come back when it ends.
    /// assert_eq!(
    ///     lines[1],
    ///     "0.050000000,true,0,acct-1,accepted,,,,0.000000000,0.100000000,1"
    /// );
    /// assert_eq!(
    ///     lines[2],
    ///     "0.150000000,true,1,,rejected,global,false,0.850000000,0.100000000,0.200000000,2"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn write_csv(&self, mut out: impl io::Write) -> io::Result<()> {
        writeln!(out, "{}", Self::CSV_HEADER)?;
        let seconds = |at: Instant| Seconds::between(self.start, at);
        for r in &self.requests {
            let (outcome, limit, in_penalty) = match r.outcome {
                Outcome::Accepted => ("accepted", "", ""),
                Outcome::Rejected { by, in_penalty } => {
                    let by = match by {
                        Limit::Global => "global",
                        Limit::Scope => "scope",
                    };
                    ("rejected", by, if in_penalty { "true" } else { "false" })
                }
            };
            writeln!(
                out,
                "{},{},{},{},{outcome},{limit},{in_penalty},{},{},{},{}",
                seconds(r.arrived),
                r.ours,
                Optional(r.number),
                CsvScope(r.scope.as_deref()),
                Optional(r.retry_after.map(Seconds::of)),
                Optional(r.sent.map(seconds)),
                Optional(r.answered.map(seconds)),
                Optional(r.sends_before_answer),
            )?;
        }
        Ok(())
    }

    /// The header line of [`Log::write_csv`], without its line break.
    pub const CSV_HEADER: &str = "arrived_s,ours,number,scope,outcome,limit,in_penalty,\
                                  retry_after_s,sent_s,answered_s,sends_before_answer";

    fn arrivals(&self, which: Which) -> Vec<Instant> {
        self.requests
            .iter()
            .filter(|r| which.counts(r))
            .map(|r| r.arrived)
            .collect()
    }
}

/// A length in seconds, exact to the nanosecond, signed.
struct Seconds {
    negative: bool,
    length: Duration,
}

impl Seconds {
    fn of(length: Duration) -> Self {
        Self {
            negative: false,
            length,
        }
    }

    fn between(start: Instant, at: Instant) -> Self {
        match at.checked_duration_since(start) {
            Some(length) => Self::of(length),
            None => Self {
                negative: true,
                length: start - at,
            },
        }
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        let (whole, nanos) = (self.length.as_secs(), self.length.subsec_nanos());
        write!(f, "{sign}{whole}.{nanos:09}")
    }
}

/// A CSV field that is empty when there is nothing.
struct Optional<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for Optional<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(value) => value.fmt(f),
            None => Ok(()),
        }
    }
}

/// A scope as a CSV field: empty for none, quoted (RFC 4180) when it must be.
struct CsvScope<'a>(Option<&'a str>);

impl std::fmt::Display for CsvScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(scope) if scope.is_empty() || scope.contains([',', '"', '\n', '\r']) => {
                write!(f, "\"{}\"", scope.replace('"', "\"\""))
            }
            Some(scope) => f.write_str(scope),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn arrival(start: Instant, at_ms: u64, ours: bool, outcome: Outcome) -> Request {
        Request {
            ours,
            number: None,
            scope: None,
            sent: None,
            arrived: start + ms(at_ms),
            answered: None,
            sends_before_answer: None,
            outcome,
            retry_after: None,
        }
    }

    const REJECTED: Outcome = Outcome::Rejected {
        by: Limit::Global,
        in_penalty: false,
    };

    #[test]
    fn window_analyses_count_what_they_are_asked_to() {
        let t0 = Instant::now();
        let log = Log::new(
            t0,
            vec![
                arrival(t0, 0, true, Outcome::Accepted),
                arrival(t0, 100, false, Outcome::Accepted),
                arrival(t0, 200, true, REJECTED),
                arrival(t0, 999, true, Outcome::Accepted),
                arrival(t0, 1_000, false, REJECTED),
            ],
        );
        assert_eq!(log.max_in_window(SEC, Which::OursAccepted), 2);
        assert_eq!(log.max_in_window(SEC, Which::OursArrived), 3);
        assert_eq!(log.max_in_window(SEC, Which::AllAccepted), 3);
        assert_eq!(log.max_in_window(SEC, Which::AllArrived), 4);
        assert_eq!(log.over_limit(SEC, 2, Which::AllArrived), 3);
        assert_eq!(log.over_limit(SEC, 0, Which::OursAccepted), 2);
        assert_eq!(
            log.fixed_windows_over(SEC, Duration::ZERO, 3, Which::AllArrived),
            1
        );
        // [-850, 150) holds 0 and 100; [150, 1150) holds 200, 999 and 1000.
        assert_eq!(
            log.fixed_windows_over(SEC, ms(150), 2, Which::AllArrived),
            1
        );
        assert_eq!(
            log.fixed_windows_over(SEC, ms(150), 3, Which::AllArrived),
            0
        );
        assert_eq!((log.accepted(), log.rejected(), log.others()), (2, 1, 2));
    }

    #[test]
    fn new_orders_by_arrival_keeping_ties_in_order() {
        let t0 = Instant::now();
        let log = Log::new(
            t0,
            vec![
                arrival(t0, 5, true, Outcome::Accepted),
                arrival(t0, 1, false, Outcome::Accepted),
                arrival(t0, 5, false, Outcome::Accepted),
            ],
        );
        let order: Vec<_> = log
            .requests()
            .iter()
            .map(|r| (r.arrived - t0, r.ours))
            .collect();
        assert_eq!(order, [(ms(1), false), (ms(5), true), (ms(5), false)]);
    }

    #[test]
    fn known_penalty_needs_delivery_before_the_send_and_a_covering_scope() {
        let t0 = Instant::now();
        let ours = |number: u64, scope: Option<&str>, sent_ms: u64| Request {
            number: Some(number),
            scope: scope.map(str::to_owned),
            sent: Some(t0 + ms(sent_ms)),
            ..arrival(t0, sent_ms + 50, true, Outcome::Accepted)
        };
        let throttle = |number, scope, by, sends_before| Request {
            outcome: Outcome::Rejected {
                by,
                in_penalty: false,
            },
            retry_after: Some(10 * SEC),
            sends_before_answer: Some(sends_before),
            ..ours(number, scope, 0)
        };
        let log = Log::new(
            t0,
            vec![
                // Scope "a" throttled at 50 ms until 10.05 s; delivered after #0..#1 were sent.
                throttle(0, Some("a"), Limit::Scope, 2),
                ours(1, Some("a"), 100), // sent before the answer came: not counted
                ours(2, Some("a"), 200), // counted
                ours(3, Some("b"), 300), // other scope: not counted
                ours(4, None, 400),      // no scope: not counted
                ours(5, Some("a"), 10_049), // counted: 10.049 s < 10.05 s
                ours(6, Some("a"), 10_050), // not counted: the penalty is over
            ],
        );
        assert_eq!(log.sent_into_known_penalty(), 2);

        let log = Log::new(
            t0,
            vec![
                throttle(0, None, Limit::Global, 1),
                ours(1, Some("b"), 300),
                ours(2, None, 400),
            ],
        );
        assert_eq!(log.sent_into_known_penalty(), 2);
    }
}
