//! Two workers share one rate through a Redis that asks what a managed Redis asks: TLS only,
//! with a certificate signed by a private CA, and an ACL user with just the store's rights.
//!
//! ```sh
//! cargo run --example redis_tls --features redis-tls,http
//! ```
//!
//! The example makes a throwaway CA and starts `redis-server` (from `PATH`) serving TLS only,
//! with the ACL user `paceline` allowed the store's commands on one namespace's keys. It
//! checks the store, shows what a wrong CA and a namespace outside the user's keys say, then
//! sends 40 calls from two gates (two workers of a fleet) to the simulated API, served over
//! HTTP with a limit of 10 requests per second, each gate paced at 9 per second for the whole
//! fleet: the server sees no request over its limit. It runs in real time, in about five
//! seconds.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[path = "../tests/support/tls.rs"]
mod tls;

use std::time::Duration;

use futures::StreamExt;
use paceline::prelude::*;
use paceline::{Gate, RateLimited, RedisStore, RedisTls};
use paceline_sim::http::serve;
use paceline_sim::{Policy, Server};
use redis_server::RedisServer;
use reqwest::StatusCode;
use tls::{Pki, RIGHTS, authority};
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);
const NAMESPACE: &str = "ads-api";

/// The server's answer when it was not a success.
#[derive(Debug)]
struct ApiError {
    status: Option<StatusCode>,
    headers: reqwest::header::HeaderMap,
}

fn classify(error: &ApiError) -> Option<RateLimited> {
    paceline::http::rate_limited_from(error.status?, &error.headers)
}

async fn call(client: &reqwest::Client, url: &str) -> Result<(), ApiError> {
    let fail = |status, headers| ApiError { status, headers };
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|_| fail(None, Default::default()))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(fail(Some(response.status()), response.headers().clone()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pki = Pki::new();
    // The namespace's keys are `paceline:{ads-api}:…`: the user may touch those alone.
    let keys = format!("~paceline:{{{NAMESPACE}}}:*");
    let mut acl = vec!["--user", "paceline", "on", ">secret", &keys];
    acl.extend(RIGHTS);
    let redis = RedisServer::start_tls(&pki.server(false, None), &acl);
    println!("redis-server serves TLS only at {}", redis.tls_url());
    println!("ACL SETUSER {}", acl[1..].join(" "));

    let url = format!("rediss://paceline:secret@127.0.0.1:{}", redis.port());
    let tls = RedisTls::new().root_cert(pki.ca_pem.clone())?;
    let store = RedisStore::open_tls(&url, NAMESPACE, &tls)?;
    store.check().await?;
    println!("check with the private CA: ok");

    let (other_ca, _) = authority("another CA");
    let wrong_ca = RedisStore::open_tls(&url, NAMESPACE, &RedisTls::new().root_cert(other_ca)?)?;
    println!(
        "check with another CA: {}",
        wrong_ca.check().await.unwrap_err()
    );
    let elsewhere = store.namespace("other-api")?;
    println!(
        "check on another namespace: {}",
        elsewhere.check().await.unwrap_err()
    );

    let api = Server::builder()
        .latency(Duration::from_millis(5))
        .global(Policy::fixed_window(10, SEC).penalty(SEC, 8 * SEC))
        .build();
    let http = serve(api, "127.0.0.1:0").await?;
    let api_url = http.url(None);
    let client = reqwest::Client::builder().no_proxy().build()?;
    let worker = |store: RedisStore| {
        Gate::builder(classify)
            .rate(9.0) // for the whole fleet
            .store(store)
            .build()
    };
    let second = RedisStore::open_tls(&url, NAMESPACE, &tls)?;
    second.check().await?;
    let gates = [worker(store)?, worker(second)?];
    println!("40 calls from two workers, each paced at 9 per second for the fleet:");

    let start = Instant::now();
    let run = |gate: &Gate<ApiError>| {
        futures::stream::iter(0..20)
            .throttled_map(gate, |_| call(&client, &api_url))
            .collect::<Vec<_>>()
    };
    let (a, b) = tokio::join!(run(&gates[0]), run(&gates[1]));
    let elapsed = start.elapsed();
    let log = http.shutdown().await.log();
    let ok = a.iter().chain(&b).filter(|r| r.is_ok()).count();
    println!(
        "done in {:.2} s: {ok} of 40 ok; every start asked Redis over TLS ({} unanswered)",
        elapsed.as_secs_f64(),
        gates
            .iter()
            .map(|g| g.stats().store_unanswered)
            .sum::<u64>(),
    );
    println!(
        "the server saw {} requests: {} accepted, {} over the limit (429)",
        log.ours().count(),
        log.accepted(),
        log.rejected(),
    );
    Ok(())
}
