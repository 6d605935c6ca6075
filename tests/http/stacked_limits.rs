//! A multi-tenant client against real stacked limits: express-rate-limit (from the npm
//! registry, started under `node`) in front of one path with two limiters, "whole", 20 a
//! second for every request of the key, and "account", 5 a second for each account (its
//! `X-Account` header), each announced as a named policy of the IETF draft's eighth revision
//! with a `pk` partition key. A SaaS syncs 12 accounts (3 of 60 pages, 9 of 5), each page
//! after the last, through one gate told no rate at all, three ways: one reqwest client with
//! the gate's middleware, [`paceline::reqwest::send`] inside `gate.call_in(account, ..)`, and
//! a scoped `gate.paged_with(options, fetch)` listing per account. Each reads what the
//! answers announce, each policy as the scope's or the gate's by its key. The binding ideal is
//! 12 s (each big account's 60 pages at 5 a second). Judged by the app's own log; real time,
//! about 15 s a way.

use std::time::Duration;

use futures::TryStreamExt;
use paceline::reqwest::GateMiddleware;
use paceline::{CallOptions, Page, PolicyOf, Scope, ScopeLimits};
use reqwest_middleware::ClientBuilder;
use tokio::time::Instant;

use crate::flask_limiter::Seen;
use crate::support::limiter_app::LimiterApp;

/// Each account's pages, the first three big.
fn pages(account: usize) -> usize {
    if account < 3 { 60 } else { 5 }
}

const ACCOUNTS: usize = 12;

/// How the sync's calls reach the gate.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// A client with the gate's middleware, scoped by the `X-Account` header.
    Middleware,
    /// `paceline::reqwest::send` inside `gate.call_in(account, ..)`, once a page.
    CallIn,
    /// One `gate.paged_with(CallOptions::new().scopes([account]), ..)` listing per account.
    Paged,
}

/// Runs the sync `way`, each of `told` policies taken as the gate's said; returns what the
/// app saw, and when each account was done.
async fn sync(app: &mut LimiterApp, way: Way, told: &[(&str, PolicyOf)]) -> (Seen, Vec<Duration>) {
    let mut gate = paceline::reqwest::gate()
        .max_in_flight(16)
        .max_retries(20)
        .per_scope(ScopeLimits::new());
    for &(policy, of) in told {
        gate = gate.policy_of(policy, of);
    }
    let gate = gate.build().unwrap();
    let middleware = GateMiddleware::new(gate.clone()).scope_by(|request: &reqwest::Request| {
        let account = request.headers().get("x-account")?;
        account.to_str().ok().map(Scope::from)
    });
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let client = ClientBuilder::new(http.clone()).with(middleware).build();
    let url = app.url();
    let start = Instant::now();
    let accounts = (0..ACCOUNTS).map(|account| {
        let (client, url, name) = (&client, &url, format!("acct-{account}"));
        let (gate, http) = (&gate, &http);
        let page = move || http.get(url).header("X-Account", name.clone());
        async move {
            match way {
                Way::Middleware => {
                    for _ in 0..pages(account) {
                        let request = client
                            .get(url)
                            .header("X-Account", format!("acct-{account}"));
                        let answer = request.send().await.expect("every page is fetched");
                        assert_eq!(answer.status(), 200);
                    }
                }
                Way::CallIn => {
                    for _ in 0..pages(account) {
                        let call = gate.call_in([format!("acct-{account}")], || {
                            paceline::reqwest::send(gate, page())
                        });
                        let answer = call.await.expect("every page is fetched");
                        assert_eq!(answer.status(), 200);
                    }
                }
                Way::Paged => {
                    let options = CallOptions::new().scopes([format!("acct-{account}")]);
                    let listing = gate.paged_with(options, |at: Option<usize>| {
                        let request = page();
                        async move {
                            let answer = paceline::reqwest::send(gate, request).await?;
                            assert_eq!(answer.status(), 200);
                            let at = at.unwrap_or(0) + 1;
                            Ok(Page {
                                rows: vec![at],
                                next: (at < pages(account)).then_some(at),
                            })
                        }
                    });
                    let rows: Vec<usize> =
                        listing.try_collect().await.expect("every page is fetched");
                    assert_eq!(rows.len(), pages(account));
                }
            }
            start.elapsed()
        }
    });
    let done = futures::future::join_all(accounts).await;
    let elapsed = start.elapsed();
    let calls = (0..ACCOUNTS).map(pages).sum();
    (
        Seen::of(elapsed, &app.stop(), (calls, Duration::from_secs(1))),
        done,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_client_told_no_rate_keeps_to_the_key_and_each_account() {
    let mut app = LimiterApp::express_stacked();
    let (seen, done) = sync(&mut app, Way::Middleware, &[]).await;
    eprintln!("stacked: {seen:?}; accounts done at {done:?}");
    // Both policies taken as each account's, as the middleware took a scoped answer's
    // before it told them apart: the whole key's limit is kept by no one.
    let mut app = LimiterApp::express_stacked();
    let scoped = [("whole", PolicyOf::Scope), ("account", PolicyOf::Scope)];
    let (each_own, _) = sync(&mut app, Way::Middleware, &scoped).await;
    eprintln!("every policy the account's: {each_own:?}");
    assert!(each_own.refused > 0, "{each_own:?}");
    // Measured (2026-12-02, 2 cores under other builds' load, three runs): 0 refused, at
    // most 19 or 20 in a second, 16.7, 16.9 and 16.7 s, the small accounts done at 2.7 to
    // 3.3 s. Every policy taken as the account's: 23 and 21 refused of 248 and 246, 23 and 26
    // accepted in one second, 16.8 and 16.7 s.
    kept_to_both(&seen, &done);
}

/// Without a middleware, in the gate's own calls and listings: `send` reads each answer as
/// the running call's scope's, so one account's 5 a second paces that account alone (read as
/// the gate's, it paced the whole client: 62.2 s). Measured (2026-12-02, as above): 0
/// refused, 16.6 s through `call_in` and 16.7 s through `paged_with`, the small accounts done
/// at 2.7 to 3.3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_calls_and_listings_told_no_rate_keep_to_the_key_and_each_account() {
    for way in [Way::CallIn, Way::Paged] {
        let mut app = LimiterApp::express_stacked();
        let (seen, done) = sync(&mut app, way, &[]).await;
        eprintln!("stacked, {way:?}: {seen:?}; accounts done at {done:?}");
        kept_to_both(&seen, &done);
    }
}

/// No refusal, neither limit broken, the small accounts done in their share beside the big.
fn kept_to_both(seen: &Seen, done: &[Duration]) {
    assert_eq!(seen.refused, 0, "{seen:?}");
    // The server's refusals judge its own fixed windows, whose phase the log does not show;
    // a span of a second across two of them may hold what both allow (seen: 19 to 22).
    assert!(seen.most_in_a_window <= 2 * 20, "{seen:?}");
    // The small accounts take their turns beside the big ones: each done within a few
    // seconds, not after them.
    let (big, small) = done.split_at(3);
    assert!(
        small.iter().all(|at| *at < Duration::from_secs(6)),
        "{done:?}"
    );
    assert!(
        big.iter().all(|at| *at > Duration::from_secs(11)),
        "{done:?}"
    );
    assert!(seen.elapsed < Duration::from_secs(25), "{seen:?}");
}
