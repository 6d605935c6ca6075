//! The simulated server: policies wired to the paused clock, and the caller's side of a call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::announce::Announced;
use super::answer::{Accepted, Rejected};
use super::log::{Limit, Log, Outcome, Request};
use super::policy::{Policy, PolicyState, Rejection};
use crate::rng::{SplitMix64, stable_hash};

/// Seeds of the generators for each purpose (scopes use the hash of their name).
const JITTER_STREAM: u64 = 0x6a69_7474_6572;
const GLOBAL_OTHERS_STREAM: u64 = 0x6f74_6865_7273;

/// A simulated rate-limited API, running in tokio's (paused) time.
///
/// Cheap to clone: clones share one server, so any number of tasks can call it. Build it with
/// [`Server::builder`], call it with [`call`](Self::call), and read what it saw with
/// [`log`](Self::log). See the [module docs](super) for a whole test.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
    start: Instant,
}

/// Configures a [`Server`]: latencies, jitter, seed and policies.
///
/// By default: 50 ms up, 50 ms down, no jitter, seed 0, no global limit, no scope limit.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use paceline_sim::{Policy, Server};
///
/// const SEC: Duration = Duration::from_secs(1);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // 100 requests per second per developer token; 2 per second per account.
/// let api = Server::builder()
///     .latency(Duration::from_millis(40))
///     .jitter(Duration::from_millis(20))
///     .seed(7)
///     .global(Policy::token_bucket(100.0, 100))
///     .per_scope(Policy::token_bucket(2.0, 2))
///     .build();
/// let (a, b) = tokio::join!(api.call(Some("acct-1")), api.call(Some("acct-2")));
/// assert!(a.is_ok() && b.is_ok());
/// let (c, d) = tokio::join!(api.call(Some("acct-1")), api.call(Some("acct-1")));
/// assert!(c.is_ok());
/// assert_eq!(d.unwrap_err().scope.as_deref(), Some("acct-1"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    latency_up: Duration,
    latency_down: Duration,
    jitter: Duration,
    seed: u64,
    global: Policy,
    per_scope: Option<Policy>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        Self {
            latency_up: Duration::from_millis(50),
            latency_down: Duration::from_millis(50),
            jitter: Duration::ZERO,
            seed: 0,
            global: Policy::unlimited(),
            per_scope: None,
        }
    }
}

impl ServerBuilder {
    /// Both latencies: the time a request takes to reach the server, and the time its answer
    /// takes to come back.
    pub fn latency(self, each_way: Duration) -> Self {
        self.latency_up(each_way).latency_down(each_way)
    }

    /// The time a request takes to reach the server (50 ms by default).
    pub fn latency_up(mut self, latency: Duration) -> Self {
        self.latency_up = latency;
        self
    }

    /// The time an answer takes to reach the caller (50 ms by default).
    pub fn latency_down(mut self, latency: Duration) -> Self {
        self.latency_down = latency;
        self
    }

    /// Adds to each trip, up and down, a pseudo-random delay of whole milliseconds between 0
    /// and `max` (rounded down to the millisecond), drawn from the seed. Requests can then
    /// overtake each other, as on a real network.
    pub fn jitter(mut self, max: Duration) -> Self {
        self.jitter = max;
        self
    }

    /// The seed of every pseudo-random draw (jitter, other clients' arrivals); 0 by default.
    /// Same seed, same calls at the same instants: same log.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The server's global limit, which every request is checked against (none by default).
    pub fn global(mut self, policy: Policy) -> Self {
        self.global = policy;
        self
    }

    /// The limit of each scope: every scope a request names gets its own copy of `policy`
    /// (its own counters, penalty and other clients), created when the first request naming
    /// it arrives. A request naming a scope must pass both its scope's limit and the global
    /// one. Without this, scopes are only recorded.
    pub fn per_scope(mut self, policy: Policy) -> Self {
        self.per_scope = Some(policy);
        self
    }

    /// Starts the server now: [`Server::start`] is `tokio::time::Instant::now()`, which is
    /// the paused clock when called inside a paused runtime.
    pub fn build(self) -> Server {
        let start = Instant::now();
        let state = State {
            start,
            latency_up: self.latency_up,
            latency_down: self.latency_down,
            jitter_ms: u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX),
            jitter: SplitMix64::derive(self.seed, JITTER_STREAM),
            seed: self.seed,
            global: PolicyState::new(
                &self.global,
                start,
                start,
                SplitMix64::derive(self.seed, GLOBAL_OTHERS_STREAM),
            ),
            per_scope: self.per_scope,
            scopes: BTreeMap::new(),
            pending: BTreeMap::new(),
            log: Vec::new(),
            ours: Vec::new(),
        };
        Server {
            state: Arc::new(Mutex::new(state)),
            start,
        }
    }
}

impl Server {
    /// A builder with the defaults (see [`ServerBuilder`]).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The instant the server was built; fixed windows, rate schedules and other clients count
    /// from it.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Calls the API, naming `scope` (an account, say) or none.
    ///
    /// The request is sent when this future is first polled, reaches the server `latency_up`
    /// later (plus jitter), is judged at that instant, and its answer reaches the caller
    /// `latency_down` after that (plus jitter), when the future completes.
    ///
    /// The server judges a request against the global limit and, if it names a scope and the
    /// server has [scope limits](ServerBuilder::per_scope), its scope's limit, in this order:
    /// a running global penalty, a running scope penalty, the global limit's room, the scope
    /// limit's room. The first that says no rejects it (and only that limit's penalty starts
    /// or grows); if none does, it counts against both.
    ///
    /// # Cancel safety
    ///
    /// Like a real request, a call dropped after it was sent still reaches the server, which
    /// judges and logs it; the caller just never sees the answer ([`Request::answered`] stays
    /// `None`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::{Policy, Server};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let api = Server::builder()
    ///     .latency_up(Duration::from_millis(30))
    ///     .latency_down(Duration::from_millis(70))
    ///     .global(Policy::fixed_window(1, Duration::from_secs(1)))
    ///     .build();
    /// assert!(api.call(None).await.is_ok());
    /// assert_eq!(api.start().elapsed(), Duration::from_millis(100));
    ///
    /// let throttled = api.call(Some("acct-1")).await.unwrap_err();
    /// // Judged at 130 ms, in the window [0, 1 s).
    /// assert_eq!(throttled.retry_after, Some(Duration::from_millis(870)));
    /// assert_eq!(throttled.scope, None); // the global limit said no
    /// # }
    /// ```
    pub async fn call(&self, scope: Option<&str>) -> Result<Accepted, Rejected> {
        let (number, arrival, due) = self.lock().send(Instant::now(), scope);
        sleep_until(arrival).await;
        self.lock().advance_to(Instant::now().max(arrival));
        sleep_until(due).await;
        self.lock().deliver(number, Instant::now())
    }

    /// A snapshot of every request the server has judged so far, in the order of arrival
    /// (requests still on their way up are not in it yet).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline_sim::{Policy, Server, Which};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let api = Server::builder().global(Policy::fixed_window(3, Duration::from_secs(1))).build();
    /// let calls = (0..5).map(|_| api.call(None));
    /// futures::future::join_all(calls).await;
    /// let log = api.log();
    /// assert_eq!((log.accepted(), log.rejected()), (3, 2));
    /// assert_eq!(log.max_in_window(Duration::from_secs(1), Which::OursArrived), 5);
    /// assert_eq!(log.max_in_window(Duration::from_secs(1), Which::OursAccepted), 3);
    /// # }
    /// ```
    pub fn log(&self) -> Log {
        let mut state = self.lock();
        state.advance_to(Instant::now());
        Log::new(self.start, state.log.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Server")
            .field("start", &self.start)
            .field("latency_up", &state.latency_up)
            .field("latency_down", &state.latency_down)
            .field("requests_logged", &state.log.len())
            .field("requests_on_their_way", &state.pending.len())
            .finish_non_exhaustive()
    }
}

/// One of our requests on its way up.
#[derive(Debug)]
struct Pending {
    scope: Option<String>,
    sent: Instant,
}

#[derive(Debug)]
struct State {
    start: Instant,
    latency_up: Duration,
    latency_down: Duration,
    jitter_ms: u64,
    jitter: SplitMix64,
    seed: u64,
    global: PolicyState,
    per_scope: Option<Policy>,
    /// Each scope's state, by name (ordered, so that iteration is deterministic).
    scopes: BTreeMap<String, PolicyState>,
    /// Our requests on their way up, by (arrival, number): the order they are judged in.
    pending: BTreeMap<(Instant, u64), Pending>,
    /// Every judged request, in the order judged (by arrival within a limit).
    log: Vec<Request>,
    /// For each of our requests, by number: its place in `log` and what its answer announces,
    /// once judged.
    ours: Vec<Option<Judged>>,
}

/// One of our requests, judged.
#[derive(Debug, Clone)]
struct Judged {
    /// Its index in the log.
    index: usize,
    /// What each announcing policy announced with its answer, the global one first.
    quotas: Vec<(Limit, Announced)>,
}

impl State {
    /// Sends request number `ours.len()` at `now`; returns its number, arrival and the instant
    /// its answer reaches the caller.
    fn send(&mut self, now: Instant, scope: Option<&str>) -> (u64, Instant, Instant) {
        let number = self.ours.len() as u64;
        self.ours.push(None);
        let arrival = now + self.latency_up + self.draw_jitter();
        let due = arrival + self.latency_down + self.draw_jitter();
        let pending = Pending {
            scope: scope.map(str::to_owned),
            sent: now,
        };
        self.pending.insert((arrival, number), pending);
        (number, arrival, due)
    }

    fn draw_jitter(&mut self) -> Duration {
        if self.jitter_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.jitter.up_to(self.jitter_ms))
    }

    /// Judges everything that has arrived by `horizon`, in the order of arrival: our requests,
    /// and other clients' (before ours at the same instant).
    fn advance_to(&mut self, horizon: Instant) {
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().0 > horizon {
                break;
            }
            let ((arrived, number), pending) = entry.remove_entry();
            others_until(&mut self.global, None, arrived, &mut self.log);
            if let Some(name) = &pending.scope {
                if let Some(policy) = &self.per_scope {
                    let scope = self.scopes.entry(name.clone()).or_insert_with(|| {
                        let rng = SplitMix64::derive(self.seed, stable_hash(name));
                        PolicyState::new(policy, self.start, arrived, rng)
                    });
                    others_until(scope, Some(name), arrived, &mut self.log);
                }
            }
            self.judge(arrived, number, pending);
        }
        others_until(&mut self.global, None, horizon, &mut self.log);
        for (name, scope) in &mut self.scopes {
            others_until(scope, Some(name), horizon, &mut self.log);
        }
    }

    fn judge(&mut self, arrived: Instant, number: u64, pending: Pending) {
        let global = &mut self.global;
        let mut scope = pending
            .scope
            .as_deref()
            .and_then(|name| self.scopes.get_mut(name));
        let rejection = global
            .penalty_check(arrived)
            .map(|r| (Limit::Global, r))
            .or_else(|| Some((Limit::Scope, scope.as_mut()?.penalty_check(arrived)?)))
            .or_else(|| global.limit_check(arrived).map(|r| (Limit::Global, r)))
            .or_else(|| Some((Limit::Scope, scope.as_mut()?.limit_check(arrived)?)));
        let (outcome, retry_after) = match rejection {
            Some((
                by,
                Rejection {
                    in_penalty,
                    retry_after,
                },
            )) => (Outcome::Rejected { by, in_penalty }, retry_after),
            None => {
                global.take(arrived);
                if let Some(scope) = scope.as_mut() {
                    scope.take(arrived);
                }
                (Outcome::Accepted, None)
            }
        };
        let global_quota = global.announce(arrived).map(|q| (Limit::Global, q));
        let scope_quota = scope
            .and_then(|scope| scope.announce(arrived))
            .map(|q| (Limit::Scope, q));
        self.ours[number as usize] = Some(Judged {
            index: self.log.len(),
            quotas: global_quota.into_iter().chain(scope_quota).collect(),
        });
        self.log.push(Request {
            ours: true,
            number: Some(number),
            scope: pending.scope,
            sent: Some(pending.sent),
            arrived,
            answered: None,
            sends_before_answer: None,
            outcome,
            retry_after,
        });
    }

    /// Request `number`'s answer reaches the caller at `now`.
    fn deliver(&mut self, number: u64, now: Instant) -> Result<Accepted, Rejected> {
        let sends = self.ours.len() as u64;
        let judged = self.ours[number as usize]
            .take()
            .expect("a request is judged before its answer");
        let request = &mut self.log[judged.index];
        let quota = Announced::tightest(judged.quotas.iter().map(|&(_, q)| q));
        let quotas = judged.quotas;
        request.answered = Some(now);
        request.sends_before_answer = Some(sends);
        match request.outcome {
            Outcome::Accepted => Ok(Accepted {
                request: number,
                quota,
                quotas,
            }),
            Outcome::Rejected { by, .. } => Err(Rejected {
                retry_after: request.retry_after,
                scope: match by {
                    Limit::Global => None,
                    Limit::Scope => request.scope.clone(),
                },
                request: number,
                quota,
                quotas,
            }),
        }
    }
}

/// Judges other clients' requests on `state` that arrive by `horizon`, logging them.
fn others_until(
    state: &mut PolicyState,
    scope: Option<&str>,
    horizon: Instant,
    log: &mut Vec<Request>,
) {
    let by = if scope.is_some() {
        Limit::Scope
    } else {
        Limit::Global
    };
    while state.next_other().is_some_and(|at| at <= horizon) {
        let (arrived, answer) = state.other_arrives();
        let (outcome, retry_after) = match answer {
            Ok(()) => (Outcome::Accepted, None),
            Err(r) => (
                Outcome::Rejected {
                    by,
                    in_penalty: false,
                },
                r.retry_after,
            ),
        };
        log.push(Request {
            ours: false,
            number: None,
            scope: scope.map(str::to_owned),
            sent: None,
            arrived,
            answered: None,
            sends_before_answer: None,
            outcome,
            retry_after,
        });
    }
}
