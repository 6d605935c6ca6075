//! Limits per account beside a global one, against a real server: nginx's `limit_req` with a
//! bucket for each account (keyed by a request header) and one for all requests, both on
//! every request. An account's bucket refuses with a 429, the global one with a 503, each
//! with `Retry-After: 1`; the gate scopes a 429 to its account (`RateLimited::scope`) and
//! takes a 503 for every call. nginx's access log, not the gate's counters, says what the
//! server saw.
//!
//! The same calls go through a gate told both limits (`rate` and `per_scope`) and, beside it,
//! one told only the global limit, which meets each account's limit by its 429s. It runs in
//! real time, some 20 s for both runs; it asserts only what a loaded machine keeps and a
//! broken gate breaks. The figures it prints are in docs/scenarios.md.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use paceline::{Gate, GateStats, RateLimited, ScopeLimits};

use crate::support::api_error::{self, ApiError, success};
use crate::support::nginx::{
    self, ACCOUNT_REFUSAL, ACCOUNT_ZONE, GLOBAL_REFUSAL_BESIDE_ACCOUNTS, GLOBAL_ZONE, LATE, Limit,
    Limits, Logged, Nginx, alone, most_sent_within,
};

/// Every request: 10 a second, a bucket of 3.
const GLOBAL: Limit = Limit {
    rate: 10,
    burst: 2,
    retry_after: 1,
};

/// Each account: 2 a second, a bucket of 2.
const PER_ACCOUNT: Limit = Limit {
    rate: 2,
    burst: 1,
    retry_after: 1,
};

const LIMITS: Limits = Limits {
    global: GLOBAL,
    per_account: Some(PER_ACCOUNT),
};

/// The calls, all made at once: account `a` 20, five more 6 each. Together the six accounts
/// could go at 12 a second, over the global 10, until the five are done; then `a` goes on
/// alone, under it.
const WORKLOAD: [(&str, usize); 6] = [("a", 20), ("b", 6), ("c", 6), ("d", 6), ("e", 6), ("f", 6)];

/// Enough that no call gives up: every call must be done.
const MAX_RETRIES: u32 = 10_000;

/// What a call fails with: the answer, and the account it was made for.
#[derive(Debug)]
struct CallError {
    account: Arc<str>,
    error: ApiError,
}

/// 429 (an account's bucket) and 503 (the global one) are throttles with their Retry-After;
/// a 429 holds back its account's calls only.
fn classify(e: &CallError) -> Option<RateLimited> {
    let throttle = api_error::classify(&e.error)?;
    Some(match &e.error {
        ApiError::Status { status, .. } if status.as_u16() == ACCOUNT_REFUSAL => {
            throttle.scope(&*e.account)
        }
        _ => throttle,
    })
}

/// A gate paced at nginx's global rate, 8 in flight; told each account's rate too, or not.
fn gate(told: bool) -> Gate<CallError> {
    let gate = Gate::builder(classify)
        .max_in_flight(8)
        .max_retries(MAX_RETRIES)
        .rate(f64::from(GLOBAL.rate));
    let gate = if told {
        gate.per_scope(ScopeLimits::new().rate(f64::from(PER_ACCOUNT.rate)))
    } else {
        gate
    };
    gate.build().unwrap()
}

/// One GET for `account`, stamped with the instant it is sent (the future runs only once the
/// gate has started the call).
async fn fetch(client: &reqwest::Client, url: &str, account: &Arc<str>) -> Result<(), CallError> {
    let failed = |error| CallError {
        account: account.clone(),
        error,
    };
    let response = client
        .get(url)
        .header(nginx::SENT_HEADER, nginx::sent_now())
        .header(nginx::ACCOUNT_HEADER, &**account)
        .send()
        .await
        .map_err(|e| failed(ApiError::Transport(e)))?;
    let body = success(response)
        .map_err(failed)?
        .text()
        .await
        .map_err(|e| failed(ApiError::Transport(e)))?;
    assert_eq!(body, "ok");
    Ok(())
}

/// A measured run: how long the calls took, what nginx logged, the gate's counters.
struct Run {
    elapsed: Duration,
    log: Vec<Logged>,
    stats: GateStats,
}

/// Makes [`WORKLOAD`]'s calls through `gate` against a fresh nginx, checks that every call was
/// done exactly once (by us and by nginx's log) and that each refusal's status stands for the
/// zone nginx's error log names, and returns the run.
async fn run(gate: Gate<CallError>, within: Duration) -> Run {
    let mut nginx = Nginx::start(LIMITS);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("a reqwest client");
    let url: Arc<str> = nginx.url().into();
    let start = tokio::time::Instant::now();
    let calls: Vec<_> = WORKLOAD
        .iter()
        .flat_map(|&(account, n)| std::iter::repeat_n(Arc::<str>::from(account), n))
        .map(|account| {
            let (gate, client, url) = (gate.clone(), client.clone(), url.clone());
            tokio::spawn(async move {
                gate.call_in([&*account], || fetch(&client, &url, &account))
                    .await
                    .map_err(|e| format!("account {account}: {e:?}"))
            })
        })
        .collect();
    let results = tokio::time::timeout(within, futures::future::join_all(calls))
        .await
        .unwrap_or_else(|_| panic!("the calls not done within {within:?}"));
    let elapsed = start.elapsed();
    // The client goes first (see `Nginx::stop`).
    drop(client);
    nginx.stop();
    let log = nginx.access_log();

    for result in results {
        result.expect("no task panicked").expect("every call done");
    }
    let stats = gate.stats();
    assert_eq!(stats.gave_up, 0);
    // nginx saw every attempt the gate started, each with its account, and accepted each
    // call once.
    assert_eq!(log.len() as u64, stats.calls, "{}", nginx.error_log());
    for &(account, n) in &WORKLOAD {
        let accepted = of(&log, account).filter(|e| e.status == 200).count();
        assert_eq!(accepted, n, "account {account}: {log:?}");
    }
    assert_eq!(
        WORKLOAD.iter().map(|&(_, n)| n).sum::<usize>(),
        count(&log, 200),
        "a request of no account, or of another: {log:?}"
    );
    // Each status stands for its zone, by nginx's own word, and nothing else was refused.
    assert_eq!(
        count(&log, ACCOUNT_REFUSAL),
        nginx.refused_by_zone(ACCOUNT_ZONE)
    );
    assert_eq!(
        count(&log, GLOBAL_REFUSAL_BESIDE_ACCOUNTS),
        nginx.refused_by_zone(GLOBAL_ZONE)
    );
    assert_eq!(
        (count(&log, ACCOUNT_REFUSAL) + count(&log, GLOBAL_REFUSAL_BESIDE_ACCOUNTS)) as u64,
        stats.throttles
    );
    assert_within_the_buckets(&log);
    Run {
        elapsed,
        log,
        stats,
    }
}

fn count(log: &[Logged], status: u16) -> usize {
    log.iter().filter(|entry| entry.status == status).count()
}

/// The requests of `account`, in the log's order.
fn of<'a>(log: &'a [Logged], account: &'a str) -> impl Iterator<Item = &'a Logged> + 'a {
    log.iter()
        .filter(move |entry| entry.account.as_deref() == Some(account))
}

/// Requests *inside a Retry-After* of the refusals with `status`: those nginx logged after
/// such a refusal (later in its log), less than `retry_after` after it (by the logged
/// instants), that the refusal's limit `covers`, with any status. Returns that count, and how
/// many of them the client sent (by its stamp) [`LATE`] or more after nginx logged the
/// refusal: those sent into a Retry-After the gate knew of. As `herd.rs` counts them for one
/// bucket.
fn inside_retry_after(
    log: &[Logged],
    status: u16,
    retry_after: u32,
    covers: impl Fn(&Logged, &Logged) -> bool,
) -> (usize, usize) {
    let retry_after = Duration::from_secs(retry_after.into());
    let (mut inside, mut late) = (0, 0);
    for (i, entry) in log.iter().enumerate() {
        let window_of = log[..i]
            .iter()
            .filter(|refusal| {
                refusal.status == status
                    && entry.at < refusal.at + retry_after
                    && covers(refusal, entry)
            })
            .map(|refusal| refusal.at)
            .min();
        if let Some(refused_at) = window_of {
            inside += 1;
            if entry.sent.is_some_and(|sent| sent >= refused_at + LATE) {
                late += 1;
            }
        }
    }
    (inside, late)
}

/// Inside an account's Retry-After: a request of the refused account.
fn account_inside(log: &[Logged]) -> (usize, usize) {
    inside_retry_after(
        log,
        ACCOUNT_REFUSAL,
        PER_ACCOUNT.retry_after,
        |refusal, entry| refusal.account == entry.account,
    )
}

/// Inside the global Retry-After: any request.
fn global_inside(log: &[Logged]) -> (usize, usize) {
    inside_retry_after(
        log,
        GLOBAL_REFUSAL_BESIDE_ACCOUNTS,
        GLOBAL.retry_after,
        |_, _| true,
    )
}

/// Slack on the instants nginx logs: it logs a request when it has answered it, after the
/// round trip to `/all` (a fraction of a millisecond, more on a loaded machine), not when its
/// buckets took it; and each clock it reads is cut to the millisecond.
const LOGGED_SLACK: Duration = Duration::from_millis(50);

/// Checks the harness: in no stretch of its own log did nginx let more through a bucket than
/// it allows, `burst + 1 + rate × t` in `t` (plus [`LOGGED_SLACK`] for t). Through an
/// account's bucket go that account's requests that it did not refuse (a 503 passed it and met
/// the global one); through the global bucket, the requests accepted.
fn assert_within_the_buckets(log: &[Logged]) {
    let within = |through: Vec<Duration>, limit: Limit, what: &str| {
        for (i, &first) in through.iter().enumerate() {
            for (j, &last) in through.iter().enumerate().skip(i) {
                let t = last.saturating_sub(first) + LOGGED_SLACK;
                let allowed = f64::from(limit.burst + 1) + f64::from(limit.rate) * t.as_secs_f64();
                let n = j - i + 1;
                assert!(
                    n as f64 <= allowed,
                    "{what}: nginx let {n} through in {t:?}; limit_req is not in force"
                );
            }
        }
    };
    for &(account, _) in &WORKLOAD {
        let through = of(log, account)
            .filter(|e| e.status != ACCOUNT_REFUSAL)
            .map(|e| e.at)
            .collect();
        within(through, PER_ACCOUNT, &format!("account {account}"));
    }
    let accepted = log.iter().filter(|e| e.status == 200).map(|e| e.at);
    within(accepted.collect(), GLOBAL, "all requests");
}

/// What a run shows, from nginx's log.
#[derive(Debug)]
struct Figures {
    elapsed: Duration,
    requests: usize,
    account_refusals: usize,
    global_refusals: usize,
    /// Inside a Retry-After, and of those, sent into one the gate knew of: an account's, and
    /// the global one.
    account_inside: (usize, usize),
    global_inside: (usize, usize),
    /// Each account's time from its first accepted request to its last, by nginx's log.
    spans: BTreeMap<&'static str, Duration>,
    /// The most requests of one account, and of all, sent within 1 s.
    most_of_an_account_in_1s: usize,
    most_in_1s: usize,
    stats: GateStats,
}

const SECOND: Duration = Duration::from_secs(1);

fn figures(run: &Run) -> Figures {
    let log = &run.log;
    let spans = WORKLOAD
        .iter()
        .map(|&(account, _)| {
            let accepted = || of(log, account).filter(|e| e.status == 200).map(|e| e.at);
            let (first, last) = (accepted().min(), accepted().max());
            (account, last.unwrap().saturating_sub(first.unwrap()))
        })
        .collect();
    Figures {
        elapsed: run.elapsed,
        requests: log.len(),
        account_refusals: count(log, ACCOUNT_REFUSAL),
        global_refusals: count(log, GLOBAL_REFUSAL_BESIDE_ACCOUNTS),
        account_inside: account_inside(log),
        global_inside: global_inside(log),
        spans,
        most_of_an_account_in_1s: WORKLOAD
            .iter()
            .map(|&(account, _)| most_sent_within(of(log, account), SECOND))
            .max()
            .unwrap_or(0),
        most_in_1s: most_sent_within(log, SECOND),
        stats: run.stats.clone(),
    }
}

/// The time an account of `n` calls takes from its first start to its last at its own rate.
fn ideal_span(n: usize) -> Duration {
    Duration::from_secs_f64((n - 1) as f64 / f64::from(PER_ACCOUNT.rate))
}

/// Prints the two runs' figures side by side.
fn print(told: &Figures, untold: &Figures) {
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let inside = |(inside, late): (usize, usize)| format!("{inside}, {late} sent when known");
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |label: String, of: &dyn Fn(&Figures) -> String| {
        rows.push((label, of(told), of(untold)));
    };
    row("all calls done in".into(), &|f| secs(f.elapsed));
    row("requests nginx logged".into(), &|f| f.requests.to_string());
    row("429s (an account's bucket)".into(), &|f| {
        f.account_refusals.to_string()
    });
    row("503s (the global bucket)".into(), &|f| {
        f.global_refusals.to_string()
    });
    row("inside an account's Retry-After".into(), &|f| {
        inside(f.account_inside)
    });
    row("inside the global Retry-After".into(), &|f| {
        inside(f.global_inside)
    });
    for &(account, n) in &WORKLOAD {
        let label = format!(
            "account {account}, {n} calls: first to last 200 (ideal {})",
            secs(ideal_span(n))
        );
        row(label, &|f| secs(f.spans[account]));
    }
    row("most of one account's sent within 1 s".into(), &|f| {
        f.most_of_an_account_in_1s.to_string()
    });
    row("most of all sent within 1 s".into(), &|f| {
        f.most_in_1s.to_string()
    });
    row("gate: attempts, throttles, retries".into(), &|f| {
        format!(
            "{}, {}, {}",
            f.stats.calls, f.stats.throttles, f.stats.retries
        )
    });
    println!(
        "accounts beside a global limit: nginx {} r/s burst {} for all (503), {} r/s burst {} \
         per account (429), nodelay, Retry-After {} s; a gate paced at {} r/s, 8 in flight",
        GLOBAL.rate,
        GLOBAL.burst,
        PER_ACCOUNT.rate,
        PER_ACCOUNT.burst,
        GLOBAL.retry_after,
        GLOBAL.rate
    );
    let told_header = format!("told {} r/s per account", PER_ACCOUNT.rate);
    println!(
        "  {:<52} {told_header:>24} {:>24}",
        "", "told only the global rate"
    );
    for (label, told, untold) in rows {
        println!("  {label:<52} {told:>24} {untold:>24}");
    }
}

/// Account `a` makes 20 calls and five more accounts 6 each, all at once, against nginx's
/// bucket per account (2 a second) beside its bucket of all requests (10 a second).
///
/// Told both limits, the gate keeps to both: nginx refuses next to nothing (none expected,
/// since the buckets' bursts take the jitter of a loaded machine; 2 allowed), each account's
/// requests are at least its rate's spacing apart, and `a`'s 20 take about the 9.5 s its
/// rate allows, within 1.25 times (a little more than 9.5 s, since `a` takes its fair share
/// of the global rate while the six accounts go together). Told only the global limit, the
/// gate meets the accounts' limit by 429s, and waits out each Retry-After on that account
/// alone. Neither sends a request into a Retry-After it knew of.
#[test]
fn accounts_beside_a_global_limit_against_nginx() {
    let within = Duration::from_secs(40);
    let told = figures(&alone(run(gate(true), within)));
    let untold = figures(&alone(run(gate(false), within)));
    print(&told, &untold);

    for f in [&told, &untold] {
        assert_eq!(
            f.account_inside.1, 0,
            "sent into an account's known Retry-After: {f:?}"
        );
        assert_eq!(
            f.global_inside.1, 0,
            "sent into the global known Retry-After: {f:?}"
        );
    }
    assert!(
        told.account_refusals + told.global_refusals <= 2,
        "told both limits: {told:?}"
    );
    for &(account, n) in &WORKLOAD {
        // Accepted, by nginx's log: its instants are cut to the millisecond, and each request
        // takes its own time from its start to its line.
        assert!(
            told.spans[account] + LOGGED_SLACK >= ideal_span(n),
            "account {account} went faster than its rate: {told:?}"
        );
    }
    let (a, n) = WORKLOAD[0];
    assert!(
        told.spans[a] <= ideal_span(n) * 5 / 4,
        "account {a} took too long: {told:?}"
    );
    // Starts spaced by the rate, stamped each a little after its start: in a second, one more
    // than the rate at most.
    assert!(
        told.most_of_an_account_in_1s <= PER_ACCOUNT.rate as usize + 1,
        "{told:?}"
    );
    assert!(told.most_in_1s <= GLOBAL.rate as usize + 1, "{told:?}");
    // Untold, the calls of one account go faster than its limit: nginx's bucket per account
    // is in force, and what the told gate kept to was its own doing.
    assert!(untold.account_refusals > 0, "{untold:?}");
}

/// The harness and the classifier: beside the accounts' buckets, nginx refuses a request that
/// its account's bucket cannot take with a 429, and one that the global bucket cannot take
/// with a 503, each with its Retry-After and each logged by its zone; the classifier scopes
/// the first to the account and not the second. A burst of calls at once, no timing asserted:
/// 6 of one account meet a bucket of 2 that refills one every 500 ms, then 20 of 20 accounts
/// a bucket of 3 that refills one every 100 ms.
#[test]
fn nginx_tells_an_accounts_refusal_from_the_global_one() {
    alone(async {
        let mut nginx = Nginx::start(LIMITS);
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a reqwest client");
        let url = nginx.url();
        // Each call's refusal, if it was refused: its status, and how `classify` takes it.
        let burst = move |accounts: Vec<String>| {
            let (client, url) = (client.clone(), url.clone());
            futures::future::join_all(accounts.into_iter().map(move |account| {
                let (client, url) = (client.clone(), url.clone());
                async move {
                    let Err(e) = fetch(&client, &url, &account.into()).await else {
                        return None;
                    };
                    match &e.error {
                        ApiError::Status { status, .. } => Some((status.as_u16(), classify(&e))),
                        ApiError::Transport(_) => panic!("{e:?}"),
                    }
                }
            }))
        };
        let refused = |answers: Vec<Option<(u16, Option<RateLimited>)>>| {
            answers.into_iter().flatten().collect::<Vec<_>>()
        };
        let one_second = Duration::from_secs(1);

        let of_x = refused(burst(vec!["x".to_owned(); 6]).await);
        assert!(of_x.len() >= 3, "{of_x:?}");
        let scoped = RateLimited::new().retry_after(one_second).scope("x");
        for refusal in &of_x {
            assert_eq!(refusal, &(ACCOUNT_REFUSAL, Some(scoped.clone())));
        }

        let of_all = refused(burst((0..20).map(|i| format!("y{i}")).collect()).await);
        assert!(!of_all.is_empty(), "{of_all:?}");
        let global = RateLimited::new().retry_after(one_second);
        for refusal in &of_all {
            assert_eq!(
                refusal,
                &(GLOBAL_REFUSAL_BESIDE_ACCOUNTS, Some(global.clone()))
            );
        }

        // The client goes first (see `Nginx::stop`).
        drop(burst);
        nginx.stop();
        let log = nginx.access_log();
        assert_eq!(nginx.refused_by_zone(ACCOUNT_ZONE), of_x.len());
        assert_eq!(nginx.refused_by_zone(GLOBAL_ZONE), of_all.len());
        assert_eq!(count(&log, ACCOUNT_REFUSAL), of_x.len());
        assert_eq!(count(&log, GLOBAL_REFUSAL_BESIDE_ACCOUNTS), of_all.len());
        assert_eq!(log.len(), 26, "{log:?}");
    });
}
