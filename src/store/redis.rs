//! The gate's shared state in Redis: one key per backoff and one for the pace, changed only by
//! Lua scripts that read the Redis server's clock.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{
    Client, Cmd, ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Script, ServerErrorKind,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use redis::Value;

use super::connection::{Lazy, Target};
use super::member::{Cost, Lease, Member, nonce, signed_micros};
#[cfg(feature = "redis-tls")]
use super::tls::RedisTls;
use crate::error::StoreError;
use crate::gate::budget::SAME_WINDOW;
use crate::gate::dimensions::{BudgetDraw, Reckoned, Source};
use crate::gate::fleet::{
    Clearance, ClockPair, FleetAsk, FleetRate, FleetStore, PerUnit, Replaced,
};
use crate::gate::{GateBuilder, Scope};
use crate::{Budget, Window};

// The budgets' prelude comes before the scripts that keep them.
const START: &str = concat!(include_str!("budgets.lua"), include_str!("start.lua"));
const SETTLE_BUDGETS: &str = concat!(
    include_str!("budgets.lua"),
    include_str!("settle_budgets.lua")
);
const OBSERVE_BUDGET: &str = concat!(
    include_str!("budgets.lua"),
    include_str!("observe_budget.lua")
);
const BACK_OFF: &str = include_str!("back_off.lua");
const SHARE_RATE: &str = include_str!("share_rate.lua");
const SETTLE: &str = include_str!("settle.lua");

/// How long the gate waits for Redis before it decides with its in-process state alone.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// After Redis failed to answer, how long calls go without asking it, so that an outage costs
/// one timeout per this while rather than one per call.
const DEFAULT_RETRY_EVERY: Duration = Duration::from_millis(500);
/// How long [`RedisStore::check`] waits for Redis at least.
const CHECK_WAIT: Duration = Duration::from_secs(2);
/// How long the keys of a check live (its backoff and pace, in a script's own units).
const CHECK_TTL: Duration = Duration::from_secs(2);
/// How long the fleet's adaptive rate outlives its last use.
const RATE_TTL: Duration = Duration::from_secs(15 * 60);
/// How long the call sent to learn a server's new window may take to bring the announcement
/// before the fleet takes it that the server announces no more (and forgets the quota). It
/// also bounds how long a process that died with that call out holds up the others.
const PROBE_ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How often a call asks again while the call that learns the new window is out.
const PROBE_POLL: Duration = Duration::from_millis(20);
/// How far past a call's own slot of the fleet's rate its scope's pace may put it and the
/// call still take that later slot at once, rather than wait out of line and ask again: more
/// than the jitter of a round trip, so that a scope paced by one process alone is not asked
/// about twice.
const SCOPE_PACE_SLACK: Duration = Duration::from_millis(2);
/// The longest a gate's leased starts may span, unless set ([`RedisStore::lease`]).
const DEFAULT_LEASE_SPAN: Duration = Duration::from_millis(20);
/// How long an announced quota is kept after its window reset: long enough that the fleet
/// sends one call to learn the next window rather than all of them at once.
const QUOTA_KEPT: Duration = Duration::from_secs(60);

/// A gate's shared state kept in Redis, so that a fleet of processes honours one backoff and
/// one rate budget: give it to [`GateBuilder::store`](crate::GateBuilder::store).
///
/// Every gate whose store has the same namespace on the same Redis acts as one gate for what
/// the store holds: a throttle seen by one holds back the calls of all (the whole gate or just
/// the throttled scope), and the call starts of all stay within the gate's rate together, and
/// those of each scope within its [rate](crate::ScopeLimits::rate). What stays in each
/// process: the in-flight limits (the gate's and each scope's), the line of waiting calls
/// (its turns, priorities and [bound](crate::GateBuilder::max_queued)), retries, the budgets
/// told a scope ([`ScopeLimits::budget`](crate::ScopeLimits::budget)), and the counters
/// of [`Gate::stats`](crate::Gate::stats). So is a rate changed while the gate runs
/// ([`Gate::set_rate`](crate::Gate::set_rate), [`Gate::set_scope_limits`](crate::Gate::set_scope_limits)):
/// set it on every process of the fleet. A scope's [adaptive](crate::ScopeLimits::adaptive)
/// rate is found by each process from its own throttles; each start of the scope asks the
/// fleet to space it by the rate its process has now.
///
/// A call of a scope whose rate the fleet has spent until later than the gate's own rate
/// would start it waits for the scope's next start out of its process's line, holding
/// neither an in-flight slot nor a slot of the gate's rate, so that the calls of other
/// scopes go on meanwhile.
///
/// # Time comes from Redis
///
/// Backoff ends and rate slots are computed inside Lua scripts from the Redis server's own
/// clock (`TIME`); a process sends only lengths ("back off 2 s from now") and receives only
/// lengths ("start in 40 ms"). A fleet whose processes each wrote the instant a backoff ends,
/// by their own clocks, would be as wrong as its worst clock: a process running 2 s fast would
/// cut every backoff it writes short by 2 s for the others, and read every backoff written by
/// the others as 2 s shorter than it is. Here a process's clock cannot matter.
///
/// # A quota the server announced
///
/// What any process learns of the server's quota ([`Gate::observe`](crate::Gate::observe),
/// or a throttle's [`RateLimited::quota`](crate::RateLimited::quota)) goes to Redis, and the
/// fleet spends one budget: by the rules `Gate::observe` states for one process (less the
/// reserve and the announcing process's calls that went out, but not those still waiting for
/// Redis to let them go, which the fleet spends as it lets them; the lowest remaining and the
/// earliest reset of a window; spread evenly until the reset), with the reset on the Redis
/// clock. Every call start spends its cost of it, whichever process made it, so a process
/// that never heard from the server itself still keeps within what the others learnt. When
/// the window is spent, calls wait for its reset; after the reset, one call of the fleet
/// goes to learn the next window, and the others ask again every 20 ms until its
/// announcement arrives, or for 5 s: a server that announced nothing by then is taken to
/// announce no more, and the fleet forgets the quota. A call waiting for the fleet's quota
/// keeps its process's in-flight slot, so an announcement arriving meanwhile counts it
/// among the calls the server may not have counted yet: the fleet spends a little less
/// than it could, never more. A call settled by
/// [`Gate::call_settled`](crate::Gate::call_settled) settles with the fleet's quota too:
/// charged, or given back to the window it spent from if no announcement has set what is
/// left since, and if no call of the fleet started after it, the next starts spread by its
/// real cost; what it cost more also pushes the fleet's next start back at the rate (what
/// it cost less stays spent there: other starts were spaced by it). The quota is one of the
/// announced windows below, kept and spent by the same scripts and rules as each of them.
///
/// # Budgets the server announced of each dimension
///
/// What any process reads of a server's budgets of each dimension and policy
/// ([`Gate::observe_all`](crate::Gate::observe_all), as the reqwest middleware and the tower
/// layer do with [`http::announced`](crate::http::announced): requests and tokens, a minute's
/// and a day's) goes to Redis as well, and the fleet spends one budget of each dimension,
/// policy and kind, on the Redis clock, beside what each process keeps by its own rules:
///
/// - a bucket that refills evenly (OpenAI's and Anthropic's) is kept as a told
///   [`Window::Refilling`](crate::Window::Refilling) budget of the limit announced, refilling
///   as the server's resets show, from its first answer that shows it;
/// - a window (fixed, or of a kind the server does not say) is kept as the announced quota
///   is: what is left until its reset, spread evenly until then; past the reset one call of
///   the fleet goes to learn the next window, and the others wait for its answer;
/// - a window the answers show to be moving stays each process's own.
///
/// Each process tells the fleet what it reckons is left after an announcement (of a window,
/// what it said, less the reserve and the calls in flight it may not have counted; of a
/// bucket, less the process's own starts since, and what other consumers take is left
/// out of its refill), and the fleet takes it only if it is less than it reckons itself: an
/// announcement counts none of the starts other processes made since, so it may only lower
/// what the fleet spends, and a bucket refills, a window resets, by itself. One answer more
/// is taken: of a window, one to a call the store started after it first read the least
/// said of it, that says more is left, is the next window's word (the server counted that
/// call after it said less), as a single gate takes it. Every call start
/// spends what it draws of each, whichever process made it, and what a call turns out to
/// cost settles with them as with a told budget (to a window only if no announcement has
/// set what is left since the call started). Against a simulated LLM API whose token bucket
/// three gates read from their answers alone, gates alone were refused 14 to 17 times, and
/// gates sharing Redis 1 or 2, in 106 % of the bucket's ideal time (the test
/// `gates_sharing_redis_spend_an_announced_bucket_as_one`).
///
/// # Budgets the server announced for a scope
///
/// What a server announces for one scope (a tenant's or an account's own limit: what
/// [`Gate::observe_all_in`](crate::Gate::observe_all_in) and [`Gate::observe_in`](crate::Gate::observe_in)
/// take in, a policy of a scoped answer that is the scope's, a quota announced with a
/// scope's throttle) is the same budget kept for that scope: it goes to Redis as the gate's
/// does, kept and spent by the same scripts and rules, at a key of its scope's, and every
/// call of that scope, whichever process starts it, spends what it draws of it as it starts
/// and settles it as it ends. The scope's generic quota (of units, without a policy) is
/// drawn by each of its calls as the gate-wide one is, whether their process heard of it or
/// not. On a gate with [limits per scope](crate::GateBuilder::per_scope) only: a gate
/// without keeps no budget of any scope. Against two simulated LLM keys, each a tenant's
/// token bucket that three gates read from their answers alone, gates alone were refused 10
/// to 15 times, and gates sharing Redis 0 or 1, in 114 to 118 % of the bucket's ideal time
/// (the test `gates_sharing_redis_keep_each_tenants_announced_bucket_as_one`).
///
/// # Budgets told the gates
///
/// Each [budget](crate::Budget) told the gates (`GateBuilder::budget`: requests and tokens a
/// minute, requests a day) is kept for the fleet in Redis, by its kind's rules and on the
/// Redis clock: a call starts only when every budget it draws from has room for what it
/// draws, whichever process starts it, and spends it there as it starts. Gates told the same
/// dimension, kind, limit and window share one budget; told otherwise, they keep each apart.
/// A fixed window's windows run back to back from the fleet's first start. Each process
/// also keeps its own budgets, which its own calls alone spend; a call waits for both. What
/// a call turns out to cost ([`Gate::call_settled`](crate::Gate::call_settled)) settles with
/// the fleet's budgets as it ends, by the gate's rules: what it cost more is spent then (a
/// start of that much), what it cost less goes back to the very start it spent from (found
/// by its instant on the Redis clock), and so for a call settled through a front-end's
/// [`Settle`](crate::Settle), which keeps that instant.
///
/// # Keys
///
/// `paceline:{NAMESPACE}:pace`, `paceline:{NAMESPACE}:rate` (for an adaptive rate),
/// `paceline:{NAMESPACE}:pace:SCOPE` (for a scope with a rate),
/// `paceline:{NAMESPACE}:budget:DIMENSION:KIND:LIMIT:MICROSECONDS` (for each
/// [budget](crate::Budget) told the gates: `f`ixed, `s`liding or `r`efilling),
/// `paceline:{NAMESPACE}:announced:DIMENSION:KIND[:POLICY]` (for each budget a server
/// announced: a `q`uota's window or an `r`efilling bucket; the gate-wide quota is
/// `announced:units:q`), `paceline:{NAMESPACE}:scope:SCOPE:announced:DIMENSION:KIND[:POLICY]`
/// (for each budget a server announced for a scope, the scope's quota among them),
/// `paceline:{NAMESPACE}:lent` (until when what [leases](Self::lease) spent of budgets may
/// come back), `paceline:{NAMESPACE}:members` (the live gates, see
/// [Membership](Self#membership)) and
/// `paceline:{NAMESPACE}:backoff[:SCOPE]`, where every byte
/// of the namespace, of a dimension's, a policy's and a scope's name other than ASCII letters, digits, `.`, `_` and `-`
/// is written as `%XX`, so that no name can reach outside its namespace. The namespace in
/// braces is a Redis Cluster hash tag: a gate's keys live on one node, where its scripts can
/// reach them all. Every key expires when what it holds has passed (the adaptive rate 15
/// minutes after its last use).
///
/// [`open`](Self::open) talks to one Redis server (or a proxy in front of a cluster);
/// [`open_cluster`](Self::open_cluster) talks to a Redis Cluster itself, following its
/// redirections while slots move.
///
/// On a Redis Cluster, a namespace's keys share its hash tag, so they live in one slot, on
/// one node: every script the fleet's gates on a namespace run, runs on that node's one
/// core. That caps a namespace at what one node runs: on the 2-core machine measured, 33,711
/// starts a second at one script run each, Redis at 83 % of a core, and 100,000 where the
/// gates leased (BENCHMARKS.md, "A large fleet on one namespace"). Other
/// namespaces spread over the other nodes. A fleet that needs more for one API can split its
/// limit: give each part of the fleet a namespace of its own and a share of the rate (two
/// namespaces at half the rate each, say). Each part then keeps its share, on the node of its
/// own slot; the parts no longer share backoffs, an announced quota or told budgets, which
/// each part must be given its share of as well.
///
/// # Commands
///
/// The store sends `EVALSHA` and, when Redis has lost its scripts, `SCRIPT LOAD` (never
/// `EVAL`); its scripts call `TIME`, `GET`, `SET`, `DEL`, `HMGET`, `HSET`, `HDEL`,
/// `PEXPIRE`, `ZADD`, `ZREMRANGEBYSCORE` and `ZCARD` (for the fleet's members), and for a
/// sliding [budget](crate::Budget) `ZRANGE`, on the keys above only. A Redis ACL user for the store needs those commands and those keys, and
/// nothing else, for instance for the namespace `ads-api:token-1` (its `:` written `%3A`):
///
/// ```text
/// ACL SETUSER paceline on >secret ~paceline:{ads-api%3Atoken-1}:* +evalsha +script|load +time +get +set +del +hmget +hset +hdel +pexpire +zrange +zadd +zremrangebyscore +zcard
/// ```
///
/// or `~paceline:*` for every namespace. Connecting needs no further right (`AUTH` and
/// `HELLO` are open to every user, and the `redis` crate ignores a refused
/// `CLIENT SETINFO`), except `+select` for a URL that names a database other than 0, and,
/// on a Redis Cluster, `+cluster|slots` for the slot map and `+asking` to follow a slot
/// while it moves. [`check`](Self::check) tries each of these rights at start-up and names
/// the one missing, but for `+asking`, which only a slot on the move calls for.
///
/// # Cost
///
/// A call start asks Redis once: one script, one round trip, before the call goes out
/// (the `store` bench measures it beside a bare `PING`; BENCHMARKS.md gives the figures). An
/// announced quota the gate is told of sends one more script, and so does each budget of
/// each dimension announced, which the announcing call's end waits for, and no start. Without a rate, the round trips of concurrent calls overlap
/// on the connection. With a rate, a process reserves its call starts in the fleet's budget
/// one round trip at a time: the start it asks for, and, for the calls of its kind (cost,
/// draws and scopes) waiting in its line, its share of the fleet's next slots in a
/// [lease](Self::lease)'s span (20 ms unless set), which its next calls of that kind take
/// without asking Redis. A process whose calls wait for the rate thus starts
/// many calls per round trip; one whose share is less asks Redis for each start.
///
/// # Membership
///
/// Each gate with a store tells the fleet it is live as it asks to start a call, once a
/// [heartbeat](Self::heartbeat) (1 s unless set), and hears how many gates are live
/// ([`GateStats::fleet_members`](crate::GateStats::fleet_members)): those that asked within
/// the last three heartbeats, on the Redis clock. A gate that stops, crashes or falls idle
/// drops out within three heartbeats, and takes no share of the fleet's limits.
///
/// # When Redis fails
///
/// If Redis does not answer within the [timeout](Self::timeout) (50 ms unless set), the gate
/// goes on with its in-process state alone, warns once through `tracing`, and asks Redis
/// again after a short while; when Redis answers, the fleet shares its state again. No call
/// is lost or held by the outage beyond one timeout. The connection is made on first use and
/// remade after a failure (the `redis` crate's `ConnectionManager`).
///
/// What the fleet promises meanwhile, state by state:
///
/// - **Healthy**: one backoff, one rate, one announced quota, one of each told budget and
///   one of each budget announced for the whole fleet, as above.
/// - **Down** (Redis does not answer): each gate keeps to its share of the fleet's limits,
///   one of its live members' as it last heard (a fleet of 4 starts a quarter of the
///   [rate](crate::GateBuilder::rate) each, and spends a quarter of the announced quota and
///   of each told budget): each start counts once for each member against the limits the
///   gate keeps in its process. The call that finds Redis silent goes back in line for its
///   share, so the change makes no burst. Together the fleet keeps its limits, as long as
///   the members it counted are the ones calling. A gate keeps the backoffs it knew and
///   those it learns; an adaptive rate goes on adapting in each process, each starting its
///   share of its own rate. A scope's told budgets were the process's own already.
///   A budget a server announced, the gate's or a scope's, goes on as the gate's own reading
///   of it, which takes the other members' spending as others' (a scope's window counts
///   each start once). A gate that has never heard Redis answer
///   knows of no fleet, and keeps to the whole limits.
/// - **Rejoining**: the first start Redis answers counts once again, spaced from the gate's
///   last start as that counted, so the fleet does not burst as it rejoins; the fleet's
///   state in Redis (if Redis restarted empty, a rate starting now) takes over from there.
/// - **Slow**: a start Redis answers later than the timeout goes as if Redis were down (set
///   the timeout above the round trip of a Redis far away). One it answers within the
///   timeout waits the longer round trip, but a gate whose calls wait for the rate
///   [leases](Self::lease) its share of the next slots with it, and asks for the next lease
///   while it spends one, so that its starts keep flowing at the rate rather than one lease
///   per round trip.
///
/// A gate that has not heard Redis answer since it was built knows of no fleet: if Redis is
/// down or slow as the fleet starts, each such gate keeps to the whole limits alone, unless
/// told how many members to [assume](Self::assume_members) until it hears. Make a call
/// through each gate as the program starts (after [`check`](Self::check)), so that it has
/// heard how many members the fleet has before the work begins.
///
/// The store needs tokio's real clock: under paused time the timeout would end before Redis
/// could answer.
///
/// # TLS
///
/// With the `redis-tls` feature, `rediss://` URLs reach Redis over TLS (rustls, with its ring
/// crypto provider), trusting the system's root certificates, or Mozilla's with the
/// `redis-tls-webpki-roots` feature; `open_tls` and `open_cluster_tls` trust a private CA
/// instead, and show a client certificate to a Redis that asks for one.
///
/// A TLS handshake takes round trips the store's 50 ms may not hold: call
/// [`check`](Self::check) at start-up, which connects with more patience, so that the first
/// calls find the connection made.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use paceline::{Gate, RedisStore, RateLimited};
///
/// # #[derive(Debug)] struct ApiError { throttled: bool }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Every worker of the fleet builds the same gate, on the same namespace.
/// let store = RedisStore::open("redis://127.0.0.1:6379", "ads-api:token-1")?;
/// let gate = Gate::builder(|e: &ApiError| e.throttled.then(RateLimited::new))
///     .rate(20.0) // calls per second, for the whole fleet
///     .store(store)
///     .build()?;
/// # drop(gate);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    link: Arc<Link>,
    keys: Arc<Keys>,
    /// The gate this store is given to, as a member of its fleet.
    member: Arc<Member>,
    /// The longest a gate's leased starts may span.
    lease_span: Duration,
}

/// The connection, shared by every namespace opened on it.
struct Link {
    /// Made on first use, inside the runtime.
    connection: Lazy,
    start: Script,
    back_off: Script,
    share_rate: Script,
    observe_budget: Script,
    settle: Script,
    settle_budgets: Script,
    timeout: Duration,
    retry_every: Duration,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// Since when Redis has failed to answer, if it has.
    down_since: Option<Instant>,
    /// No call asks Redis before this.
    quiet_until: Option<Instant>,
    /// The last answer's instant on both clocks.
    clock: Option<ClockPair>,
}

struct Keys {
    namespace: String,
    /// `paceline:{ns}:`
    prefix: String,
    pace: String,
    rate: String,
    gate_backoff: String,
    /// Until when what leases spent of budgets may come back.
    lent: String,
    members: String,
}

impl Keys {
    fn new(namespace: &str) -> Self {
        let prefix = format!("paceline:{{{}}}:", escape(namespace));
        Self {
            namespace: namespace.to_owned(),
            pace: format!("{prefix}pace"),
            rate: format!("{prefix}rate"),
            gate_backoff: format!("{prefix}backoff"),
            lent: format!("{prefix}lent"),
            members: format!("{prefix}members"),
            prefix,
        }
    }

    /// Keys of the same namespace for [`RedisStore::check`], apart from the gates' keys and
    /// from those of other checks running at the same time.
    fn for_check(&self) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        let nonce = nonce(nanos, std::process::id());
        let prefix = format!("{}check:{nonce:016x}:", self.prefix);
        Self {
            namespace: self.namespace.clone(),
            pace: format!("{prefix}pace"),
            rate: format!("{prefix}rate"),
            gate_backoff: format!("{prefix}backoff"),
            lent: format!("{prefix}lent"),
            members: format!("{prefix}members"),
            prefix,
        }
    }

    /// The key of `scope`'s backoff (the gate-wide one is `gate_backoff`).
    fn scope_backoff(&self, scope: &Scope) -> String {
        format!("{}backoff:{}", self.prefix, escape(scope.as_str()))
    }

    /// The key of `scope`'s pace, for a scope with a rate (the gate's is `pace`).
    fn scope_pace(&self, scope: &Scope) -> String {
        format!("{}pace:{}", self.prefix, escape(scope.as_str()))
    }

    /// The key of one of the fleet's budgets. A budget told the gates: one per dimension,
    /// kind, limit and window, so that gates told different budgets keep each apart. A
    /// budget a server announced: one per dimension, kind and policy, whatever the limit
    /// and refill each gate read of it last, and one of each for every scope it was
    /// announced for.
    fn budget(&self, budget: &Budget, source: &Source) -> String {
        let dimension = escape(budget.dimension().as_str());
        let code = kind_code(budget.kind(), source);
        let (scope, policy) = match source {
            Source::Told => {
                let (limit, per) = (budget.limit(), micros(budget.per()));
                return format!("{}budget:{dimension}:{code}:{limit}:{per}", self.prefix);
            }
            Source::Announced(policy) => (String::new(), policy),
            Source::AnnouncedIn(scope, policy) => {
                (format!("scope:{}:", escape(scope.as_str())), policy)
            }
        };
        let policy = policy.as_deref().map(|p| format!(":{}", escape(p)));
        let policy = policy.unwrap_or_default();
        format!("{}{scope}announced:{dimension}:{code}{policy}", self.prefix)
    }
}

/// How long start.lua keeps what it writes: the fleet's rate after its last use, the call
/// sent to learn a new window, and a gate's membership.
struct Kept {
    rate: Duration,
    probe: Duration,
    member: Duration,
}

/// start.lua, on `link`, among `keys`: may a call of `scopes` that costs `cost` start, paced
/// `interval` apart, and each scope with a rate as `asked` says? `member`: the gate's id, if
/// the start tells the fleet it is live; `starts`: how many starts of this cost the gate asks
/// for (more than one: it leases the others), within `span`.
fn start_call(
    (link, keys, kept): (&Link, &Keys, &Kept),
    (scopes, interval, asked, member): (&[Scope], Option<Duration>, &FleetAsk, Option<&str>),
    (cost, starts, span): (u64, u32, Duration),
) -> Cmd {
    // The scopes with a rate, by their number among the call's scopes (from 1).
    let paced: Vec<(usize, &Scope, Duration)> = (1..)
        .zip(scopes.iter().zip(&asked.scope_paces))
        .filter_map(|(number, (scope, pace))| Some((number, scope, (*pace)?)))
        .collect();
    let budgets = &asked.budgets;
    let key_count = 5 + scopes.len() + paced.len() + budgets.len();
    let mut call = evalsha(&link.start, key_count);
    call.arg(&keys.pace).arg(&keys.rate).arg(&keys.gate_backoff);
    for scope in scopes {
        call.arg(keys.scope_backoff(scope));
    }
    for (_, scope, _) in &paced {
        call.arg(keys.scope_pace(scope));
    }
    for budget in budgets.iter() {
        call.arg(keys.budget(&budget.budget, &budget.source));
    }
    call.arg(&keys.lent).arg(&keys.members);
    let known = asked
        .known_rate
        .map_or(-1, |version| i64::try_from(version).unwrap_or(-1));
    call.arg(interval.map_or(0, micros))
        .arg(known)
        .arg(kept.rate.as_millis() as u64)
        .arg(cost)
        .arg(micros(kept.probe))
        .arg(micros(PROBE_POLL))
        .arg(scopes.len())
        .arg(micros(SCOPE_PACE_SLACK))
        .arg(budgets.len());
    for (number, _, pace) in &paced {
        call.arg(number).arg(micros(*pace));
    }
    budget_args(&mut call, budgets);
    call.arg(starts)
        .arg(micros(span))
        .arg(member.unwrap_or_default())
        .arg(micros(kept.member));
    call
}

/// settle_budgets.lua, on `link`, among `keys`: a call that started at `sent` (on Redis's
/// clock, if known) with each of `budgets`' units cost `actual` of each, in turn.
fn settle_budgets_call(
    (link, keys): (&Link, &Keys),
    budgets: &[BudgetDraw],
    actual: &[u64],
    sent: Option<i64>,
) -> Cmd {
    let mut call = evalsha(&link.settle_budgets, budgets.len());
    for budget in budgets {
        call.arg(keys.budget(&budget.budget, &budget.source));
    }
    call.arg(sent.unwrap_or(-1));
    budget_args(&mut call, budgets);
    call.arg(actual);
    call
}

/// observe_budget.lua, on `link`, for the budget `budget` is of among `keys`.
fn observe_budget_call(link: &Link, keys: &Keys, budget: &Reckoned) -> Cmd {
    let Reckoned {
        budget,
        source,
        left,
        resets_in,
        unsent,
        said,
        dated,
    } = budget;
    let mut call = evalsha(&link.observe_budget, 1);
    call.arg(keys.budget(budget, source))
        .arg(kind_code(budget.kind(), source))
        .arg(budget.limit())
        .arg(micros(budget.per()))
        .arg(left)
        .arg(micros(*resets_in))
        .arg(micros(SAME_WINDOW))
        .arg(QUOTA_KEPT.as_millis() as u64)
        .arg(unsent)
        .arg(said)
        .arg(dated.map_or(0, NonZeroU64::get));
    call
}

/// What budgets.lua reads of each of `budgets`: its kind, limit, window and units.
fn budget_args(call: &mut Cmd, budgets: &[BudgetDraw]) {
    for BudgetDraw {
        budget,
        units,
        source,
    } in budgets
    {
        call.arg(kind_code(budget.kind(), source))
            .arg(budget.limit())
            .arg(micros(budget.per()))
            .arg(units);
    }
}

/// How budgets.lua names a budget's kind of window: an announced window (q) is kept by
/// what the server said is left until its reset.
fn kind_code(kind: Window, source: &Source) -> &'static str {
    match (kind, source) {
        (Window::Refilling, _) => "r",
        (_, Source::Announced(_) | Source::AnnouncedIn(..)) => "q",
        (Window::Fixed, Source::Told) => "f",
        (Window::Sliding, Source::Told) => "s",
    }
}

/// Writes every byte but ASCII letters, digits, `.`, `_` and `-` as `%XX`: an escaped name
/// holds no `:`, `{` or `}`, and two names escape alike only if they are alike.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl RedisStore {
    /// A store on the Redis at `url` (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` for TLS with the `redis-tls` feature, `redis+unix:///path`), under
    /// `namespace`: every gate that shares state must use the same one (say, the API's host
    /// and the developer token).
    ///
    /// Over `rediss://` the store trusts the system's root certificates (or Mozilla's, with the
    /// `redis-tls-webpki-roots` feature); for a private CA or a client certificate, see
    /// `open_tls`.
    ///
    /// Nothing is sent yet: the connection is made on first use, so a store can be made while
    /// Redis is down; [`check`](Self::check) connects at once and tells what is wrong.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`] if `url` is not a Redis URL; [`StoreError::EmptyNamespace`]
    /// if `namespace` is empty.
    pub fn open(url: &str, namespace: &str) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(|error| StoreError::InvalidUrl {
            reason: error.to_string(),
        })?;
        Self::with_link(Arc::new(Link::new(Target::Server(client))), namespace)
    }

    /// A store on the Redis at `url` (`rediss://[user:password@]host[:port][/db]`), over TLS
    /// that trusts and shows what `tls` says: a private CA's root certificate, a client
    /// certificate for a Redis that asks for one (`tls-auth-clients yes`).
    ///
    /// The TLS is rustls' with its ring crypto provider, made the process's default at the
    /// first connection unless the program installed one of its own before.
    ///
    /// Nothing is sent yet, as with [`open`](Self::open).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`] if `url` is not a `rediss://` URL;
    /// [`StoreError::EmptyNamespace`] if `namespace` is empty.
    ///
    /// # Examples
    ///
    /// A managed Redis whose certificate a private CA signed, with an ACL user:
    ///
    /// ```no_run
    /// use paceline::{Gate, RateLimited, RedisStore, RedisTls};
    ///
    /// # #[derive(Debug)] struct ApiError;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/paceline/redis-ca.pem")?;
    /// let tls = RedisTls::new().root_cert(ca)?;
    /// let url = "rediss://paceline:secret@redis.internal:6380";
    /// let store = RedisStore::open_tls(url, "ads-api:token-1", &tls)?;
    /// // Fails now, with what is wrong, rather than at the first call.
    /// store.check().await?;
    /// let gate = Gate::builder(|_: &ApiError| Some(RateLimited::new()))
    ///     .rate(20.0)
    ///     .store(store)
    ///     .build()?;
    /// # drop(gate);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "redis-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn open_tls(url: &str, namespace: &str, tls: &RedisTls) -> Result<Self, StoreError> {
        let client = match tls.certificates() {
            None => Client::open(url),
            Some(certificates) => Client::build_with_tls(url, certificates),
        }
        .map_err(|error| StoreError::InvalidUrl {
            reason: error.to_string(),
        })?;
        if !matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ) {
            return Err(StoreError::InvalidUrl {
                reason: "TLS needs a rediss:// URL".to_owned(),
            });
        }
        Self::with_link(Arc::new(Link::new(Target::Server(client))), namespace)
    }

    /// A store on a Redis Cluster, found through `seeds` (the URLs of some of its nodes, in
    /// the form [`open`](Self::open) takes), under `namespace`.
    ///
    /// The store follows the cluster's redirections (`MOVED` when a slot has moved, `ASK`
    /// while it moves) and learns the new slot map, so a resharding or a failover costs calls
    /// a retry, not an error. A namespace's keys share one hash slot (see [Keys](Self#keys)),
    /// so each of its scripts runs on one node.
    ///
    /// Nothing is sent yet: the slot map is asked for on first use.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`] if a seed is not a Redis URL; [`StoreError::NoSeeds`] if
    /// `seeds` is empty; [`StoreError::EmptyNamespace`] if `namespace` is empty.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use paceline::{Gate, RateLimited, RedisStore};
    ///
    /// # #[derive(Debug)] struct ApiError;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let seeds = ["redis://10.0.0.5:7000", "redis://10.0.0.6:7000"];
    /// let store = RedisStore::open_cluster(seeds, "ads-api:token-1")?;
    /// let gate = Gate::builder(|_: &ApiError| Some(RateLimited::new()))
    ///     .rate(20.0)
    ///     .store(store)
    ///     .build()?;
    /// # drop(gate);
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_cluster(
        seeds: impl IntoIterator<Item = impl AsRef<str>>,
        namespace: &str,
    ) -> Result<Self, StoreError> {
        let seeds = connection_infos(seeds)?;
        Self::with_link(Arc::new(Link::new(Target::Cluster(seeds))), namespace)
    }

    /// A store on a Redis Cluster, found through `seeds` (`rediss://` URLs), under
    /// `namespace`, over TLS that trusts and shows what `tls` says on every node: see
    /// [`open_cluster`](Self::open_cluster) and [`open_tls`](Self::open_tls).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidUrl`] if a seed is not a `rediss://` URL; [`StoreError::NoSeeds`]
    /// if `seeds` is empty; [`StoreError::EmptyNamespace`] if `namespace` is empty.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use paceline::{RedisStore, RedisTls};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tls = RedisTls::new().root_cert(std::fs::read("/etc/paceline/redis-ca.pem")?)?;
    /// let seeds = ["rediss://10.0.0.5:7000", "rediss://10.0.0.6:7000"];
    /// let store = RedisStore::open_cluster_tls(seeds, "ads-api:token-1", &tls)?;
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "redis-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn open_cluster_tls(
        seeds: impl IntoIterator<Item = impl AsRef<str>>,
        namespace: &str,
        tls: &RedisTls,
    ) -> Result<Self, StoreError> {
        let seeds = connection_infos(seeds)?;
        if let Some(plain) = seeds
            .iter()
            .find(|seed| !matches!(seed.addr(), redis::ConnectionAddr::TcpTls { .. }))
        {
            return Err(StoreError::InvalidUrl {
                reason: format!("TLS needs rediss:// URLs, and a seed is {}", plain.addr()),
            });
        }
        let target = match tls.certificates() {
            None => Target::Cluster(seeds),
            Some(certificates) => Target::ClusterTls(seeds, certificates),
        };
        Self::with_link(Arc::new(Link::new(target)), namespace)
    }

    fn with_link(link: Arc<Link>, namespace: &str) -> Result<Self, StoreError> {
        if namespace.is_empty() {
            return Err(StoreError::EmptyNamespace);
        }
        Ok(Self {
            link,
            keys: Arc::new(Keys::new(namespace)),
            member: Arc::new(Member::new(super::member::DEFAULT_HEARTBEAT, 1)),
            lease_span: DEFAULT_LEASE_SPAN,
        })
    }

    /// The same connection under another namespace, for the gate of another API.
    ///
    /// # Errors
    ///
    /// [`StoreError::EmptyNamespace`] if `namespace` is empty.
    pub fn namespace(&self, namespace: &str) -> Result<Self, StoreError> {
        Self::with_link(Arc::clone(&self.link), namespace)
    }

    /// How long a call waits for Redis before the gate decides without it. Default 50 ms.
    ///
    /// Set it before the store is cloned or given to a gate; it applies to the stores made
    /// from this one by [`namespace`](Self::namespace) afterwards.
    ///
    /// # Panics
    ///
    /// If `timeout` is zero, or if this store's connection is already shared. A timeout read
    /// from configuration goes through [`try_timeout`](Self::try_timeout) instead, which
    /// answers with an error.
    #[track_caller]
    pub fn timeout(self, timeout: Duration) -> Self {
        match self.try_timeout(timeout) {
            Ok(store) => store,
            Err(error) => panic!("{error}"),
        }
    }

    /// [`timeout`](Self::timeout), for a timeout that may not work (read from
    /// configuration) or a store that may be shared already.
    ///
    /// The timeout is the connection's, which every clone of the store and every store made
    /// from it by [`namespace`](Self::namespace) share (each connects with its patience, and
    /// one store's silent Redis quiets the others), so a store shares it as it is: one whose
    /// connection is already shared cannot be given a timeout of its own.
    ///
    /// # Errors
    ///
    /// [`StoreError::ZeroTimeout`] if `timeout` is zero; [`StoreError::SharedConnection`] if
    /// the store's connection is already shared (the store was cloned, given to a gate, or
    /// made by or for `namespace`). The store is dropped with the error: the stores that
    /// share its connection keep theirs, and their timeout, as they were.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use paceline::{RedisStore, StoreError};
    ///
    /// # fn main() -> Result<(), StoreError> {
    /// // A timeout in ms, as read from a configuration file.
    /// let timeout_ms: u64 = "200".parse().unwrap();
    /// let store = RedisStore::open("redis://127.0.0.1:6379", "ads-api")?
    ///     .try_timeout(Duration::from_millis(timeout_ms))?;
    /// // Too late for a store whose connection another store shares.
    /// let other = store.namespace("search-api")?;
    /// let refused = other.try_timeout(Duration::from_secs(1));
    /// assert!(matches!(refused, Err(StoreError::SharedConnection)));
    /// assert!(matches!(store.try_timeout(Duration::ZERO), Err(StoreError::ZeroTimeout)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        if timeout.is_zero() {
            return Err(StoreError::ZeroTimeout);
        }
        let link = Arc::get_mut(&mut self.link).ok_or(StoreError::SharedConnection)?;
        link.timeout = timeout;
        Ok(self)
    }

    /// How often a gate on this store tells the fleet it is live, as it asks to start a
    /// call. Default 1 s. A gate that has not for three heartbeats has dropped out: the fleet
    /// counts its live members by them, and each takes its share of the fleet's limits while
    /// Redis does not answer (see [When Redis fails](Self#when-redis-fails)).
    ///
    /// # Panics
    ///
    /// If `every` is zero.
    #[track_caller]
    pub fn heartbeat(mut self, every: Duration) -> Self {
        assert!(!every.is_zero(), "`every` must be longer than zero");
        self.member = Arc::new(Member::new(every, self.member.assumed));
        self
    }

    /// How many gates the fleet is taken to have until a gate on this store has heard from
    /// Redis how many are live. Default 1.
    ///
    /// A gate that has never heard Redis answer knows of no fleet: if Redis is down or slow
    /// as the program starts, it keeps to the whole limits alone, and a fleet of such gates
    /// together to as many times the limits. (A bench's 1,000 gates, most of whose first
    /// calls found no connection within the store's timeout, started 12.8 times the fleet's
    /// rate.) With `members` set to the size the fleet runs at, such a gate keeps to that
    /// share of the limits, as it would had it heard so many, until Redis answers; then the
    /// members heard count, as ever (see [When Redis fails](Self#when-redis-fails)).
    ///
    /// # Panics
    ///
    /// If `members` is zero.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use paceline::RedisStore;
    ///
    /// // 40 workers: until it hears otherwise, each keeps to a fortieth of the limits.
    /// let store = RedisStore::open("redis://127.0.0.1:6379", "ads-api")?.assume_members(40);
    /// # Ok::<(), paceline::StoreError>(())
    /// ```
    #[track_caller]
    pub fn assume_members(mut self, members: u64) -> Self {
        assert!(members > 0, "`members` must be at least 1");
        self.member = Arc::new(Member::new(self.member.heartbeat, members));
        self
    }

    /// The longest a gate's leased starts may span. Default 20 ms; zero leases nothing.
    ///
    /// A gate with a [rate](crate::GateBuilder::rate) whose calls wait in its line leases
    /// the fleet's next slots for them as it asks Redis for one: its share of the fleet's
    /// starts in this span (the rate over the fleet's live [members](Self#membership)), but
    /// no more than wait. Its next calls of the same cost take them in turn without asking
    /// Redis, each at its slot, or, if they come late, an interval after the one before,
    /// until the lease expires a span after its last slot. So a process starts many calls per
    /// round trip to Redis; and were every member's calls to wait, their leases together
    /// would reach a span ahead.
    ///
    /// A Redis far away does not hold a gate to a lease a round trip: a lease covers the
    /// span or two of the gate's last round trips to Redis, whichever is longer, and once the
    /// lease it spends has less than two round trips left, and more calls wait than it
    /// covers, the gate asks for the next while it spends the rest. (Two gates at 1,000 calls a second, measured: round trips of 10
    /// and 40 ms cost the fleet no starts a second beside Redis on loopback; asking only once
    /// a lease ran out cost it 21 and 29 %.) What a lease costs:
    ///
    /// - In a window of the server's, the fleet may start more than its rate by the slots
    ///   its processes took late: at most the slots leased out at once, each process's at
    ///   most two leases (the one it spends and the next), each its share of the span or of
    ///   two round trips: with the default span on loopback, 20 ms of the fleet's rate
    ///   leased out at once (2 % in a second's window), 40 ms at the most.
    /// - A backoff another process begins reaches this one once its leases are spent, at
    ///   most twice the span (or four round trips) later; a throttle this process sees ends
    ///   its own leases at once.
    /// - A slot its calls leave unused (dropped, held by a backoff, or leased as its line ran
    ///   out) is lost to the fleet's rate; what the lease spent of a budget for it goes back
    ///   once the lease expires. A call that a budget has no room for meanwhile, in any
    ///   process, asks again once what leases spent of it may have come back (a span after
    ///   their expiry), rather than wait for the room the budget has without it.
    ///
    /// Where a gate's share of a span is less than two starts (a gate that starts fewer
    /// calls than about one per round trip, at the default span), where its calls do not
    /// wait, and before it has heard how many members the fleet has, nothing is leased: each
    /// start asks Redis, as without leases.
    ///
    /// A lease is for one kind of call: its cost, what it draws of each budget, and its
    /// scopes. Only calls of that kind spend it, so that a call never takes a slot past its
    /// own scopes' backoffs and rates; calls of several kinds (tenants taking turns, say)
    /// each lease their own, side by side. Calls that draw from budgets told the gates lease
    /// each slot with its units spent at its own instant, as far as every budget has room.
    /// A call of a scope with a [rate](crate::ScopeLimits::rate) leases slots at the
    /// slower of the scope's pace and the gate's; each slot takes one of the fleet's rate
    /// from the next ones, though it may be spent later, as a slot taken late is (so the
    /// rate's other slots go to other calls, and the bound above holds). (Two gates, four
    /// tenants at 200 calls a second each, measured: 0.51 script runs a start, where each
    /// start asked before.)
    ///
    /// While the fleet spends a quota the server announced, a lease's slots are spread as
    /// the quota spreads starts (each its share of the time left until the reset), and each
    /// leaves a span and a slot before the reset, so that a slot taken late is still spent
    /// in the window it was counted in. An announcement has not counted the slots leased
    /// and not yet started, as it has not counted the calls in flight: the announcing gate
    /// takes off its own calls in flight; the other gates' leased slots are among those the
    /// fleet leases out at once, the bound above. (Two gates 5 ms each way
    /// from Redis, measured: 288 to 299 starts of a window of 300, where asking Redis for
    /// each start made 130 to 141.)
    pub fn lease(mut self, span: Duration) -> Self {
        self.lease_span = span;
        self
    }

    /// Connects to Redis now, unless the store is connected, and runs each of the store's
    /// scripts once, so that a wrong address, certificate or password, or an ACL user short of
    /// a right the store needs, shows when the program starts, as a typed error, rather than
    /// as the warning a gate logs when it goes on without Redis.
    ///
    /// The scripts run on keys of the store's namespace set aside for the check
    /// (`paceline:{NAMESPACE}:check:…`, gone within seconds), so that every command and key
    /// pattern the store needs is tried without touching the gates' state. A store that
    /// passes the check may still find Redis down later; the gate then goes on without it
    /// (see [When Redis fails](Self#when-redis-fails)).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unreachable`] if Redis does not answer within 2 s (or the store's
    /// [timeout](Self::timeout), if longer); [`StoreError::Tls`] if the TLS handshake fails;
    /// [`StoreError::Denied`] if Redis refuses the user or one of the commands or keys listed
    /// under [Commands](Self#commands); [`StoreError::Failed`] if Redis answers with another
    /// error (it knows no `EVALSHA`, say).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use paceline::{RedisStore, StoreError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::open("redis://paceline:secret@127.0.0.1:6379", "ads-api")?;
    /// match store.check().await {
    ///     Ok(()) => {}
    ///     Err(StoreError::Denied { reason }) => panic!("fix the ACL user: {reason}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self) -> Result<(), StoreError> {
        let wait = self.link.timeout.max(CHECK_WAIT);
        match timeout(wait, self.try_every_script()).await {
            Ok(result) => result.map_err(|error| check_failure(&self.link, error)),
            Err(_) => Err(StoreError::Unreachable {
                reason: format!("no answer within {wait:?}"),
            }),
        }
    }

    /// Loads the scripts, then runs each so that every command they send is sent.
    async fn try_every_script(&self) -> RedisResult<()> {
        let link = &self.link;
        let keys = self.keys.for_check();
        // Made here, a connection has the check's patience: a TLS handshake (and reading the
        // system's root certificates) can take longer than the store's timeout for answers.
        let mut connection = link.connection.get(link.timeout.max(CHECK_WAIT)).await?;
        let scripts = [
            &link.start,
            &link.back_off,
            &link.share_rate,
            &link.observe_budget,
            &link.settle,
            &link.settle_budgets,
        ];
        for script in scripts {
            script.load_async(&mut connection).await?;
        }
        let ttl_ms = CHECK_TTL.as_millis() as u64;
        // A budget of each kind, told and announced, so that the commands each sends are
        // tried.
        let budget = |kind| Budget::new(crate::Dimension::REQUESTS, 1, CHECK_TTL).window(kind);
        let told = [Window::Fixed, Window::Sliding, Window::Refilling]
            .map(|kind| BudgetDraw::told(budget(kind), 1));
        let announced = [Window::Fixed, Window::Refilling].map(|kind| BudgetDraw {
            source: Source::Announced(Some("check".into())),
            ..BudgetDraw::told(budget(kind), 1)
        });
        let budgets: Vec<BudgetDraw> = told.into_iter().chain(announced).collect();
        let observe = |draw: &BudgetDraw, resets_in| {
            let reckoned = Reckoned {
                budget: draw.budget.clone(),
                source: draw.source.clone(),
                left: 1,
                resets_in,
                unsent: 0,
                said: 1,
                dated: None,
            };
            observe_budget_call(link, &keys, &reckoned)
        };
        // A start of a scope with a rate, drawing from every budget, with a heartbeat
        // (`ZREMRANGEBYSCORE`, `ZADD`, `PEXPIRE`, `ZCARD`).
        let check = [Scope::from("check")];
        let asked = FleetAsk {
            known_rate: Some(0),
            scope_paces: Box::new([Some(CHECK_TTL)]),
            budgets: budgets.clone().into(),
            waiting: 0,
        };
        let kept = Kept {
            rate: CHECK_TTL,
            probe: CHECK_TTL,
            member: CHECK_TTL,
        };
        let start = || {
            let call = (&check[..], Some(CHECK_TTL), &asked, Some("check"));
            start_call((link, &keys, &kept), call, (1, 1, DEFAULT_LEASE_SPAN))
        };
        // A window that resets at once (`DEL`, `HSET`, `PEXPIRE`); a start after it, sent to
        // learn the next window (`GET` of the backoffs, `HMGET` of the rate and the budgets,
        // `HSET`, `SET` of the pace); an answer that the window resets now (`HDEL`).
        let window = &budgets[3];
        (link.run(
            &link.observe_budget,
            &observe(window, Duration::from_micros(1)),
        ))
        .await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
        link.run(&link.start, &start()).await?;
        (link.run(&link.observe_budget, &observe(window, Duration::ZERO))).await?;
        // What a server announced of each announced budget (`SET`, `HMGET`, `DEL`, `HSET`,
        // `PEXPIRE`), a start spending them, and a call that cost more (`GET`, `SET`).
        for draw in &budgets[3..] {
            link.run(&link.observe_budget, &observe(draw, CHECK_TTL))
                .await?;
        }
        link.run(&link.start, &start()).await?;
        let mut settle = evalsha(&link.settle, 2);
        settle
            .arg(&keys.pace)
            .arg(keys.scope_pace(&Scope::from("check")))
            .arg(1)
            .arg(1_000)
            .arg(1_000);
        link.run(&link.settle, &settle).await?;
        // A call that cost more of each budget than it started with, and one that cost less.
        for (sent, actual) in [(None, 2), (Some(0), 0)] {
            let used = vec![actual; budgets.len()];
            let settle = settle_budgets_call((link, &keys), &budgets, &used, sent);
            link.run(&link.settle_budgets, &settle).await?;
        }
        // A gate-wide backoff: `SET` of the backoff and the pace.
        let mut back_off = evalsha(&link.back_off, 2);
        back_off
            .arg(&keys.gate_backoff)
            .arg(&keys.pace)
            .arg(micros(CHECK_TTL));
        link.run(&link.back_off, &back_off).await?;
        // The first version of a rate: `HSET` and `PEXPIRE`.
        let mut share_rate = evalsha(&link.share_rate, 1);
        share_rate
            .arg(&keys.rate)
            .arg(0)
            .arg(1.0)
            .arg("check")
            .arg(ttl_ms);
        link.run(&link.share_rate, &share_rate).await?;
        Ok(())
    }

    /// Runs one script call (made by [`evalsha`]) with the timeout; `None` if Redis did not
    /// answer in time or failed, in which case the caller decides without it. Every reply of
    /// the script holds the Redis server's clock at index `now_at`, whatever its kind.
    fn ask(
        &self,
        script: fn(&Link) -> &Script,
        call: Cmd,
        now_at: usize,
    ) -> impl Future<Output = Option<Vec<Value>>> + Send + 'static {
        let store = self.clone();
        async move {
            let now = Instant::now();
            if store
                .link
                .health()
                .quiet_until
                .is_some_and(|until| now < until)
            {
                return None;
            }
            let run = store.link.run(script(&store.link), &call);
            let answer = match timeout(store.link.timeout, run).await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {:?}", store.link.timeout)),
            };
            store.link.record(answer, now_at, &store.keys.namespace)
        }
    }
}

impl Link {
    /// Sends `call` of `script`, teaching Redis the script first if it has lost it.
    async fn run(&self, script: &Script, call: &Cmd) -> RedisResult<Vec<Value>> {
        let mut connection = self.connection.get(self.timeout).await?;
        match call.query_async::<Vec<Value>>(&mut connection).await {
            // A Redis that restarted (or flushed its scripts) must be taught it again;
            // on a cluster, every node is taught it.
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut connection).await?;
                call.query_async(&mut connection).await
            }
            answer => answer,
        }
    }

    fn new(target: Target) -> Self {
        Self {
            connection: Lazy::new(target),
            start: Script::new(START),
            back_off: Script::new(BACK_OFF),
            share_rate: Script::new(SHARE_RATE),
            observe_budget: Script::new(OBSERVE_BUDGET),
            settle: Script::new(SETTLE),
            settle_budgets: Script::new(SETTLE_BUDGETS),
            timeout: DEFAULT_TIMEOUT,
            retry_every: DEFAULT_RETRY_EVERY,
            health: Mutex::default(),
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes whether Redis answered: warns once when it stops, tells when it is back.
    fn record(
        &self,
        answer: Result<Vec<Value>, String>,
        now_at: usize,
        namespace: &str,
    ) -> Option<Vec<Value>> {
        let now = Instant::now();
        let mut health = self.health();
        match answer {
            Ok(answer) => {
                if let Some(store_micros) = int(&answer, now_at) {
                    health.clock = Some(ClockPair {
                        local: now,
                        store_micros,
                    });
                }
                if let Some(since) = health.down_since.take() {
                    tracing::info!(
                        target: "paceline::store",
                        namespace,
                        down_ms = (now - since).as_millis() as u64,
                        "Redis answers again: the fleet shares its backoffs and budget again"
                    );
                }
                health.quiet_until = None;
                Some(answer)
            }
            Err(reason) => {
                if health.down_since.is_none() {
                    health.down_since = Some(now);
                    tracing::warn!(
                        target: "paceline::store",
                        namespace,
                        reason = reason.as_str(),
                        "Redis does not answer: the gate goes on with its own state until it does"
                    );
                }
                health.quiet_until = Some(now + self.retry_every);
                None
            }
        }
    }
}

/// What a failed [`RedisStore::check`] of `link` tells the user.
fn check_failure(link: &Link, error: RedisError) -> StoreError {
    let mut reason = error.to_string();
    #[cfg(feature = "redis-tls")]
    if let Some(tls) = tls_error(&error) {
        return StoreError::Tls {
            reason: tls.to_string(),
        };
    }
    // The cluster client keeps only the words of the error that kept it from every seed, as
    // the detail of an error of its own: rustls' words for a refused certificate, either way.
    #[cfg(feature = "redis-tls")]
    if error.detail().is_some_and(|detail| {
        ["invalid peer certificate", "received fatal alert"]
            .iter()
            .any(|words| detail.contains(words))
    }) {
        return StoreError::Tls { reason };
    }
    // Redis's words when its ACL refuses a command or a key: on a call, on the `SELECT` of a
    // new connection (which the `redis` crate wraps in an error of its own), or inside a
    // script, where it names the command only by the script's hash and line: the line is
    // found in the script named here.
    let acl = ["no permissions to", "user executing the script can't"]
        .iter()
        .any(|words| reason.contains(words));
    if let Some(file) = [
        (&link.start, "start.lua"),
        (&link.back_off, "back_off.lua"),
        (&link.share_rate, "share_rate.lua"),
        (&link.observe_budget, "observe_budget.lua"),
        (&link.settle, "settle.lua"),
        (&link.settle_budgets, "settle_budgets.lua"),
    ]
    .into_iter()
    .find_map(|(script, file)| reason.contains(script.get_hash()).then_some(file))
    {
        reason.push_str(&format!(" (the script is paceline's src/store/{file})"));
    }
    // A client that has not authenticated may send no argument longer than 16 KB (Redis's
    // `unauthenticated bulk length`): the store's largest script is, so Redis ends the
    // connection there, rather than answer `NOAUTH`.
    let unauthenticated = reason.contains("unauthenticated");
    let refused = acl
        || unauthenticated
        || error.kind() == ErrorKind::AuthenticationFailed
        || error.code() == Some("NOAUTH");
    if refused {
        StoreError::Denied { reason }
    } else if matches!(error.kind(), ErrorKind::Server(_)) {
        StoreError::Failed { reason }
    } else {
        StoreError::Unreachable { reason }
    }
}

/// The rustls error under `error`, if the TLS handshake failed.
#[cfg(feature = "redis-tls")]
fn tls_error(error: &RedisError) -> Option<&rustls::Error> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // The `redis` crate shares what it wraps, and an `io::Error` hides what it wraps from
        // `source`: both are looked into.
        if let Some(shared) = error.downcast_ref::<Shared>() {
            cause = Some(&**shared);
            continue;
        }
        if let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            cause = Some(inner);
            continue;
        }
        cause = error.source();
    }
    None
}

/// The connection details of a cluster's `seeds`: at least one, each a Redis URL.
fn connection_infos(
    seeds: impl IntoIterator<Item = impl AsRef<str>>,
) -> Result<Vec<redis::ConnectionInfo>, StoreError> {
    let seeds = seeds
        .into_iter()
        .map(|url| url.as_ref().into_connection_info())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| StoreError::InvalidUrl {
            reason: error.to_string(),
        })?;
    if seeds.is_empty() {
        return Err(StoreError::NoSeeds);
    }
    Ok(seeds)
}

/// A call of `script` by its hash, its `keys` keys and then its arguments to be added in order:
/// the whole call in one buffer, built before it is sent.
fn evalsha(script: &Script, keys: usize) -> Cmd {
    const TYPICAL_ARGS: usize = 4;
    const TYPICAL_BYTES: usize = 256;
    let mut call = Cmd::with_capacity(3 + keys + TYPICAL_ARGS, TYPICAL_BYTES);
    call.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    call
}

/// Whole microseconds, saturating: what the scripts count in.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn from_micros(micros: i64) -> Duration {
    Duration::from_micros(micros.max(0).unsigned_abs())
}

/// The integer at `index` of a script's reply.
pub(super) fn int(reply: &[Value], index: usize) -> Option<i64> {
    match reply.get(index)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// The text at `index` of a script's reply, if not empty.
fn text(reply: &[Value], index: usize) -> Option<&str> {
    match reply.get(index)? {
        Value::BulkString(bytes) if !bytes.is_empty() => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// The script calls, each as [`FleetStore`]'s method of the same name makes it (keys, then
/// arguments in the order the script reads them).
impl RedisStore {
    /// start.lua: may a call of `scopes` that costs `cost` start, paced `interval` apart,
    /// and each scope with a rate as `asked` says?
    /// `member`: the gate's id, if the start tells the fleet it is live; `starts`: how many
    /// starts of this cost the gate asks for (more than one: it leases the others), within
    /// `span`.
    pub(super) fn start_call(
        &self,
        scopes: &[Scope],
        interval: Option<Duration>,
        (asked, member, starts): (&FleetAsk, Option<&str>, u32),
        (cost, span): (u64, Duration),
    ) -> Cmd {
        let kept = Kept {
            rate: RATE_TTL,
            probe: PROBE_ANSWER_WITHIN,
            member: self.member.lives(),
        };
        let call = (scopes, interval, asked, member);
        start_call((&self.link, &self.keys, &kept), call, (cost, starts, span))
    }

    /// settle_budgets.lua: a call that started at `sent` (on Redis's clock, if known) with
    /// each of `budgets`' units cost `actual` of each, in turn.
    pub(super) fn settle_budgets_call(
        &self,
        budgets: &[BudgetDraw],
        actual: &[u64],
        sent: Option<i64>,
    ) -> Cmd {
        settle_budgets_call((&self.link, &self.keys), budgets, actual, sent)
    }

    /// back_off.lua: calls of `scope` (or all) wait `length` from now.
    pub(super) fn back_off_call(&self, scope: Option<&Scope>, length: Duration) -> Cmd {
        let mut call = evalsha(&self.link.back_off, if scope.is_none() { 2 } else { 1 });
        match scope {
            None => call.arg(&self.keys.gate_backoff).arg(&self.keys.pace),
            Some(scope) => call.arg(self.keys.scope_backoff(scope)),
        };
        call.arg(micros(length));
        call
    }

    /// observe_budget.lua: a server announced `budget`, as this process reckons it now.
    pub(super) fn observe_budget_call(&self, budget: &Reckoned) -> Cmd {
        observe_budget_call(&self.link, &self.keys, budget)
    }

    /// settle.lua: a call cost `more` units more, at `per_unit` between two starts per unit
    /// of each pace.
    pub(super) fn settle_call(&self, more: u64, per_unit: &PerUnit<'_>) -> Cmd {
        let mut call = evalsha(&self.link.settle, 1 + per_unit.scopes.len());
        call.arg(&self.keys.pace);
        for (scope, _) in &per_unit.scopes {
            call.arg(self.keys.scope_pace(scope));
        }
        call.arg(more).arg(per_unit.gate.map_or(0, micros));
        for (_, per_unit) in &per_unit.scopes {
            call.arg(micros(*per_unit));
        }
        call
    }

    /// The key the scripts keep `scope`'s pace in.
    #[cfg(test)]
    pub(super) fn scope_pace_key(&self, scope: &Scope) -> String {
        self.keys.scope_pace(scope)
    }

    /// The key of `scope`'s generic quota.
    #[cfg(test)]
    pub(super) fn quota_key_in(&self, scope: &Scope) -> String {
        let quota = quota_draw_in(Some(scope), 0);
        self.keys.budget(&quota.budget, &quota.source)
    }

    /// The keys the scripts keep the pace and the announced generic quota in.
    #[cfg(test)]
    pub(super) fn pace_and_quota_keys(&self) -> (&str, String) {
        let quota = quota_draw(0);
        (
            &self.keys.pace,
            self.keys.budget(&quota.budget, &quota.source),
        )
    }

    /// observe_budget.lua of the generic quota: `left` units until its reset in `resets_in`.
    #[cfg(test)]
    pub(super) fn quota_observe_call(
        &self,
        scope: Option<&Scope>,
        left: u64,
        resets_in: Duration,
    ) -> Cmd {
        let BudgetDraw { budget, source, .. } = quota_draw_in(scope, 0);
        let reckoned = Reckoned {
            budget,
            source,
            left,
            resets_in,
            unsent: 0,
            said: left,
            dated: None,
        };
        self.observe_budget_call(&reckoned)
    }

    /// Teaches `connection`'s Redis every script, for calls sent without the store's link.
    #[cfg(test)]
    pub(super) fn load_scripts(&self, connection: &mut redis::Connection) -> RedisResult<()> {
        let link = &self.link;
        let scripts = [
            &link.start,
            &link.back_off,
            &link.observe_budget,
            &link.settle,
            &link.settle_budgets,
        ];
        for script in scripts {
            script.load(connection)?;
        }
        Ok(())
    }
}

/// What a start of `units` spends of `scope`'s generic quota, or the gate's.
#[cfg(test)]
pub(super) fn quota_draw_in(scope: Option<&Scope>, units: u64) -> BudgetDraw {
    let draw = quota_draw(units);
    match scope {
        Some(scope) => draw.in_scope(scope).expect("an announced budget"),
        None => draw,
    }
}

/// What a start of `units` spends of the generic quota, as a gate with a store draws it.
#[cfg(test)]
pub(super) fn quota_draw(units: u64) -> BudgetDraw {
    let budget = Budget::new(crate::Dimension::UNITS, 1, Duration::from_secs(1));
    BudgetDraw {
        budget: budget.window(Window::Fixed),
        units,
        source: Source::Announced(None),
    }
}

/// The starts start.lua reserved for a call: the first, on this process's clock and on
/// Redis's (in microseconds), how many, and the interval between two.
struct Reserved {
    first: Instant,
    at: i64,
    starts: u32,
    interval: Duration,
}

impl Reserved {
    /// Those after the first, leased for calls that cost `cost`, expiring `span` after the
    /// last is due.
    fn after_first(&self, cost: Cost, span: Duration) -> Option<Lease> {
        let next = (
            self.first + self.interval,
            self.at + signed_micros(self.interval),
        );
        let left = self.starts.checked_sub(1).filter(|left| *left > 0)?;
        Some(Lease::new(cost, next, (self.interval, left), span))
    }

    /// All of them, leased for calls that cost `cost`, expiring `span` after the last is due.
    fn all(&self, cost: Cost, span: Duration) -> Lease {
        let first = (self.first, self.at);
        Lease::new(cost, first, (self.interval, self.starts), span)
    }
}

/// What `member` learns from start.lua's `reply` to a start it asked for at `asked_at`
/// (`told_live`: telling the fleet it is live): the round trip, the fleet's live members,
/// and the starts Redis reserved for it, if it let the call go.
fn heard_start(
    member: &Member,
    reply: &[Value],
    (asked_at, told_live): (Instant, bool),
) -> Option<Reserved> {
    if reply.is_empty() {
        return None;
    }
    let now = Instant::now();
    member.tripped(now - asked_at);
    let members = int(reply, 6).and_then(|n| u64::try_from(n).ok());
    if let (true, Some(members @ 1..)) = (told_live, members) {
        member.heard(members, now);
    }
    let field = |i| int(reply, i);
    match (field(0), field(1), field(5), field(7), field(8)) {
        (Some(1), Some(wait), Some(at), Some(starts @ 1..), Some(interval)) => Some(Reserved {
            first: now + from_micros(wait),
            at,
            starts: u32::try_from(starts).unwrap_or(u32::MAX),
            interval: from_micros(interval),
        }),
        _ => None,
    }
}

/// What start.lua's `reply` says of the call.
pub(super) fn clearance(reply: &[Value]) -> Clearance {
    match (int(reply, 0), int(reply, 1)) {
        (Some(1), Some(wait)) => Clearance::Go {
            wait: from_micros(wait),
            fleet: fleet_rate(int(reply, 3), text(reply, 4)),
            at: int(reply, 5),
        },
        (Some(0), Some(remaining)) => Clearance::Held {
            scope: int(reply, 3)
                .and_then(|which| usize::try_from(which).ok())
                .and_then(|which| which.checked_sub(1)),
            remaining: from_micros(remaining),
        },
        (Some(2), Some(wait)) => Clearance::Later(from_micros(wait)),
        (Some(3), Some(wait)) => match int(reply, 3).and_then(|n| usize::try_from(n).ok()) {
            Some(number @ 1..) => Clearance::Paced {
                scope: number - 1,
                wait: from_micros(wait),
            },
            _ => Clearance::Unavailable,
        },
        _ => Clearance::Unavailable,
    }
}

impl RedisStore {
    /// Asks Redis for the next lease while the gate still spends one (`ticket` from
    /// [`Member::refill_due`]), for its calls of `cost` (as `asked` draws and paces its
    /// scopes) spaced `interval` apart, as many as are `wanted`: a round trip longer than
    /// the lease's span then no longer holds the gate to a lease a round trip. A refill is
    /// all lease; one that finds a backoff, or a fleet's rate newer than the gate's, ends
    /// what the gate leased, so that its next call asks Redis and learns of it.
    fn refill(
        &self,
        (ticket, wanted): (u64, u32),
        (interval, cost): (Duration, Cost),
        asked: &FleetAsk,
    ) {
        let member = Arc::clone(&self.member);
        let span = member.lease_span(self.lease_span);
        let starts = member.starts_to_ask(wanted, interval, span);
        if starts < 2 {
            member.refilled(ticket, &cost, None);
            return;
        }
        let now = Instant::now();
        let beat = member.due(now);
        let told_live = beat.is_some();
        let call = self.start_call(
            &cost.scopes,
            Some(interval),
            (asked, beat, starts),
            (cost.units, span),
        );
        let asked = self.ask(|link| &link.start, call, 2);
        let store = self.clone();
        tokio::spawn(async move {
            let reply = asked.await.unwrap_or_default();
            let reserved = heard_start(&member, &reply, (now, told_live));
            let lease = match clearance(&reply) {
                Clearance::Go { fleet: None, .. } => reserved.map(|r| r.all(cost.clone(), span)),
                Clearance::Go { .. } | Clearance::Held { .. } => {
                    member.revoke();
                    None
                }
                _ => None,
            };
            // Only a lease that spent budgets has anything to give back.
            let expires = (lease.as_ref())
                .filter(|lease| !lease.cost.draws.is_empty())
                .map(|lease| lease.expires);
            if let (Some(id), Some(expires)) = (member.refilled(ticket, &cost, lease), expires) {
                store.reclaim_when_expired(id, expires);
            }
        });
    }

    /// Once the lease `id` expired (at `expires`, or later if its starts moved on), gives
    /// back to the fleet's budgets what it spent for the starts its calls never took, each
    /// at the start's instant, as a call that used nothing would.
    fn reclaim_when_expired(&self, id: u64, expires: Instant) {
        let store = self.clone();
        tokio::spawn(async move {
            let mut at = expires;
            let lease = loop {
                tokio::time::sleep_until(at).await;
                match store.member.reclaim(id, Instant::now()) {
                    Ok(lease) => break lease,
                    Err(later) => at = later,
                }
            };
            let Some(lease) = lease else { return };
            let unused = vec![0; lease.cost.draws.len()];
            for sent in lease.reserved_left() {
                store.settle_budgets(&lease.cost.draws, &unused, Some(sent));
            }
        });
    }
}

impl FleetStore for RedisStore {
    fn clear(
        &self,
        scopes: &[Scope],
        interval: Option<Duration>,
        asked: &FleetAsk,
        cost: u64,
    ) -> BoxFuture<'static, Clearance> {
        let now = Instant::now();
        // A call the gate's rate spaces may take a start leased before for calls of its kind
        // (units, draws and scopes), or lease starts for the calls of its kind waiting behind
        // it, as many as the gate starts in a span.
        let kind = (cost, &*asked.budgets, scopes);
        if let Some(interval) = interval {
            if let Some((wait, at)) = self.member.leased(kind, now) {
                if let Some((ticket, left)) = self.member.refill_due(kind, now) {
                    // Only while more calls wait than the lease being spent covers: a line
                    // that is running out leases nothing more. One that is not will want as
                    // many again once this lease is spent.
                    let wanted = if asked.waiting > left {
                        asked.waiting
                    } else {
                        0
                    };
                    self.refill((ticket, wanted), (interval, Cost::new(kind)), asked);
                }
                let go = Clearance::Go {
                    wait,
                    fleet: None,
                    at: Some(at),
                };
                return Box::pin(std::future::ready(go));
            }
        }
        // The interval is the fleet's between two starts of this call's cost.
        let span = self.member.lease_span(self.lease_span);
        let starts = match interval {
            Some(interval) => {
                let wanted = asked.waiting.saturating_add(1);
                (self.member).starts_to_ask(wanted, interval, span)
            }
            None => 1,
        };
        let beat = self.member.due(now);
        let told_live = beat.is_some();
        let call = self.start_call(scopes, interval, (asked, beat, starts), (cost, span));
        let lease_cost = (starts > 1).then(|| Cost::new(kind));
        let asked = self.ask(|link| &link.start, call, 2);
        let store = self.clone();
        Box::pin(async move {
            let reply = asked.await.unwrap_or_default();
            // The call takes the first start; the others are leased.
            let reserved = heard_start(&store.member, &reply, (now, told_live));
            let lease = reserved.zip(lease_cost);
            if let Some(lease) = lease.and_then(|(r, cost)| r.after_first(cost, span)) {
                let (expires, budgets) = (lease.expires, !lease.cost.draws.is_empty());
                let id = store.member.lease_out(lease);
                if budgets {
                    store.reclaim_when_expired(id, expires);
                }
            }
            clearance(&reply)
        })
    }

    fn back_off(&self, scope: Option<&Scope>, length: Duration) {
        // What this gate leased before the throttle is not spent.
        self.member.revoke();
        let call = self.back_off_call(scope, length);
        // Fire and forget: the throttled call waits on the in-process backoff, and a retry
        // asks Redis before it starts, by which time this has landed.
        tokio::spawn(self.ask(|link| &link.back_off, call, 1));
    }

    fn observe_budget(&self, budget: &Reckoned) -> Option<JoinHandle<()>> {
        let call = self.observe_budget_call(budget);
        // On its way at once, as a backoff is: the calls that ask after it lands spend by it.
        let telling = self.ask(|link| &link.observe_budget, call, 2);
        Some(tokio::spawn(async move {
            telling.await;
        }))
    }

    fn settle_budgets(&self, budgets: &[BudgetDraw], actual: &[u64], sent: Option<i64>) {
        let call = self.settle_budgets_call(budgets, actual, sent);
        // Fire and forget, as a settled cost is: the calls that ask after it lands go by it.
        tokio::spawn(self.ask(|link| &link.settle_budgets, call, 2));
    }

    fn settle(&self, more: i64, per_unit: &PerUnit<'_>) {
        // What a call cost less stays spent of the paces: nothing to tell.
        let Ok(more @ 1..) = u64::try_from(more) else {
            return;
        };
        let call = self.settle_call(more, per_unit);
        tokio::spawn(self.ask(|link| &link.settle, call, 2));
    }

    fn replace_rate(
        &self,
        based_on: u64,
        per_second: f64,
        state: String,
    ) -> BoxFuture<'static, Option<Replaced>> {
        let mut call = evalsha(&self.link.share_rate, 1);
        call.arg(&self.keys.rate)
            .arg(based_on)
            .arg(per_second)
            .arg(state)
            .arg(RATE_TTL.as_millis() as u64);
        let asked = self.ask(|link| &link.share_rate, call, 2);
        Box::pin(async move {
            let reply = asked.await?;
            match (int(&reply, 0)?, int(&reply, 1)?) {
                (1, _) => Some(Replaced::Stored),
                (_, 0) => Some(Replaced::Expired),
                (_, latest) => fleet_rate(Some(latest), text(&reply, 3)).map(Replaced::Stale),
            }
        })
    }

    fn members(&self) -> u64 {
        self.member.members()
    }

    fn sharing(&self) -> u64 {
        self.member.sharing()
    }

    fn clock(&self) -> Option<ClockPair> {
        self.link.health().clock
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        tokio::spawn(task);
    }
}

impl<E> GateBuilder<E> {
    /// Keeps the state that a fleet of processes shares (backoffs, the rate budget) in Redis:
    /// every gate on the same store namespace honours the others' backoffs, and their call
    /// starts together stay within the [`rate`](Self::rate). See [`RedisStore`].
    ///
    /// Without a store (the default) the gate keeps all its state in the process, and no call
    /// waits for anything but the gate itself.
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn store(self, store: RedisStore) -> Self {
        // A member of the fleet of its own, whichever gates the store was given to before.
        let member = Arc::new(store.member.another());
        self.fleet(Arc::new(RedisStore { member, ..store }))
    }
}

/// The fleet's rate in a script's reply: its version and its state, if both are there.
fn fleet_rate(version: Option<i64>, state: Option<&str>) -> Option<FleetRate> {
    Some(FleetRate {
        version: u64::try_from(version?).ok()?,
        state: state?.to_owned(),
    })
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.keys.namespace)
            .field("timeout", &self.link.timeout)
            .field("connected", &self.link.connection.is_made())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start's reply, heard by the gate that asked 3 ms before: the round trip, the fleet's
    /// members, and the starts reserved, which the call takes the first of and leases the
    /// others, each found again at its instant on Redis's clock.
    #[test]
    fn a_start_reply_tells_the_trip_the_members_and_the_starts_to_lease() {
        let member = Member::new(super::super::member::DEFAULT_HEARTBEAT, 1);
        let asked = Instant::now() - Duration::from_millis(3);
        // Go after 2 ms, at 7,000,000 µs; 5 members; 3 starts 1,500 µs apart.
        let mut reply = [1, 2_000, 6_998_000, 0, 0, 7_000_000, 5, 3, 1_500].map(Value::Int);
        reply[4] = Value::BulkString(Vec::new());
        let heard = heard_start(&member, &reply, (asked, true)).expect("a start");
        assert_eq!(member.members(), 5);
        assert!(member.lease_span(Duration::ZERO).is_zero());
        assert!(member.lease_span(Duration::from_micros(1)) >= Duration::from_millis(6));
        assert_eq!((heard.at, heard.starts), (7_000_000, 3));
        assert_eq!(heard.interval, Duration::from_micros(1_500));
        let lease = heard
            .after_first(Cost::new((1, &[], &[])), Duration::ZERO)
            .unwrap();
        assert_eq!((lease.reserved, lease.left), (7_001_500, 2));
        assert_eq!(lease.next, heard.first + Duration::from_micros(1_500));
        let all = heard.all(Cost::new((1, &[], &[])), Duration::ZERO);
        assert_eq!(
            (all.reserved, all.left, all.next),
            (7_000_000, 3, heard.first)
        );
        // One start reserved leases nothing; a call held, or no answer, reserves nothing.
        let one = [1, 0, 0, 0, 0, 7_000_000, -1, 1, 1_500].map(Value::Int);
        let heard = heard_start(&member, &one, (asked, false)).unwrap();
        assert!(
            heard
                .after_first(Cost::new((1, &[], &[])), Duration::ZERO)
                .is_none()
        );
        let held = [0, 5_000, 0, 0].map(Value::Int);
        assert!(heard_start(&member, &held, (asked, false)).is_none());
        assert!(heard_start(&member, &[], (asked, false)).is_none());
    }

    #[test]
    fn escaped_names_stay_inside_their_namespace() {
        assert_eq!(escape("ads-api.v2_x"), "ads-api.v2_x");
        assert_eq!(escape("a:b"), "a%3Ab");
        assert_eq!(escape("}{"), "%7D%7B");
        assert_eq!(escape("%3A"), "%253A");
        assert_eq!(escape("ü"), "%C3%BC");
        let keys = Keys::new("tok{en}:1");
        assert_eq!(keys.pace, "paceline:{tok%7Ben%7D%3A1}:pace");
        assert_eq!(
            keys.scope_backoff(&Scope::from("acct:7")),
            "paceline:{tok%7Ben%7D%3A1}:backoff:acct%3A7"
        );
        // A scope named like another key's suffix cannot become that key.
        assert_ne!(keys.scope_backoff(&Scope::from("")), keys.gate_backoff);
    }

    proptest::proptest! {
        #[test]
        fn escaping_keeps_names_apart_and_inside_the_hash_tag(a in ".*", b in ".*") {
            let (ea, eb) = (escape(&a), escape(&b));
            let breaks_out = ea.contains(['{', '}', ':']);
            proptest::prop_assert!(!breaks_out, "{:?} escapes to {:?}", a, ea);
            proptest::prop_assert_eq!(a == b, ea == eb);
            let key = Keys::new(&a).scope_backoff(&Scope::from(b.as_str()));
            // Redis Cluster hashes what lies between the first `{` and the next `}`.
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            proptest::prop_assert_eq!(tag, ea);
        }

        #[test]
        fn checks_at_one_instant_by_processes_whose_ids_differ_in_one_bit_use_different_keys(
            nanos: u64,
            pid: u32,
            bit in 0..u32::BITS,
        ) {
            let other = pid ^ (1 << bit);
            proptest::prop_assert_ne!(nonce(nanos, pid), nonce(nanos, other));
        }

        #[test]
        fn checks_by_one_process_at_instants_that_differ_in_one_bit_use_different_keys(
            nanos: u64,
            pid: u32,
            bit in 0..u64::BITS,
        ) {
            let other = nanos ^ (1 << bit);
            proptest::prop_assert_ne!(nonce(nanos, pid), nonce(other, pid));
        }
    }
}
