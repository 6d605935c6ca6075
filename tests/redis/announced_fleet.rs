//! Gates told no limit, each knowing of an LLM API's token bucket only what its answers
//! announce, call it together: sharing a real Redis, they spend the bucket as one, where
//! gates alone each take the level an answer announced for their own. Real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use paceline::{
    Announcement, CallOptions, Cost, Dimension, Gate, GateBuilder, RateLimited, RedisStore,
};
use paceline_sim::{Completion, Llm, RefusedCompletion};
use tokio::time::Instant;

use crate::support::redis_server::RedisServer;

/// The API's tokens: 4,000 a "minute" of 2 s, a bucket that refills 2,000 a second.
const TPM: u64 = 4_000;
const MINUTE: Duration = Duration::from_secs(2);
pub(super) const GATES: usize = 3;
const PROMPTS_EACH: u64 = 24;
const MAX_TOKENS: u64 = 100;

/// How long the gates start calls knowing little: the first answers come back after about
/// 40 ms, and each gate has then read one of them.
const BLIND_START: Duration = Duration::from_millis(200);

/// What the gates' calls came to: refused by the server (of them, those sent after the blind
/// start), tokens used, and how long it took.
#[derive(Debug)]
struct Run {
    refused: u64,
    refused_after_blind_start: u64,
    tokens: u64,
    took: Duration,
}

/// The API, its answers drawn from `seed`.
pub(super) fn llm(seed: u64) -> Llm {
    Llm::builder()
        .tokens_per_minute(TPM)
        .minute(MINUTE)
        .latency(Duration::from_millis(2))
        .generation(Duration::from_millis(20), Duration::from_millis(20))
        .seed(seed)
        .build()
}

/// Every budget `answer`, of `llm`, announces.
pub(super) fn announced(
    llm: &Llm,
    answer: &Result<Completion, RefusedCompletion>,
) -> Vec<Announcement> {
    let headers = match answer {
        Ok(completion) => &completion.headers,
        Err(refused) => &refused.headers,
    };
    let map: http::HeaderMap = (headers.iter())
        .map(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.as_bytes());
            (name.unwrap(), http::HeaderValue::from_str(value).unwrap())
        })
        .collect();
    paceline::http::announced_at(&map, llm.wall_clock())
}

/// `GATES` gates of 4 calls in flight, on `store` if given (else each alone), as `with`
/// builds them further, each retrying a refused call after the time the refusal says.
pub(super) fn gates(
    store: Option<&RedisStore>,
    with: impl Fn(GateBuilder<RefusedCompletion>) -> GateBuilder<RefusedCompletion>,
) -> Vec<Gate<RefusedCompletion>> {
    let gate = |_| {
        let builder = Gate::builder(|refused: &RefusedCompletion| {
            Some(RateLimited::new().retry_after(refused.retry_after))
        })
        .max_in_flight(4)
        .max_retries(50)
        .quota_reserve(0);
        match store {
            Some(store) => with(builder).store(store.clone()),
            None => with(builder),
        }
        .build()
        .unwrap()
    };
    (0..GATES).map(gate).collect()
}

/// A Redis of the test's own, and a store on it, on `namespace`, that Redis answers.
pub(super) async fn store(namespace: &str) -> (RedisServer, RedisStore) {
    let redis = RedisServer::start();
    let store = RedisStore::open(&redis.url(), namespace).expect("a store");
    store.check().await.expect("Redis answers");
    (redis, store)
}

/// The prompts of gate `g`: 50 to 250 tokens.
fn prompts(g: u64) -> impl Iterator<Item = u64> {
    (0..PROMPTS_EACH).map(move |i| 50 + ((g * PROMPTS_EACH + i) * 83) % 201)
}

/// `GATES` gates, each with 4 prompts in flight, on `store` if given (else each alone),
/// reading every budget the answers announce.
async fn run(store: Option<RedisStore>) -> Run {
    let llm = Arc::new(llm(5));
    let gates = gates(store.as_ref(), |builder| builder);
    let start = Instant::now();
    let after_blind_start = Arc::new(AtomicU64::new(0));
    let each = gates.iter().zip(0..).map(|(gate, g)| {
        let (llm, after_blind_start) = (llm.clone(), after_blind_start.clone());
        futures::stream::iter(prompts(g))
            .map(move |input| {
                let (llm, gate) = (llm.clone(), gate.clone());
                let after_blind_start = after_blind_start.clone();
                async move {
                    let estimate =
                        CallOptions::new().cost_in(Dimension::TOKENS, input + MAX_TOKENS);
                    let make = || {
                        let (llm, gate) = (llm.clone(), gate.clone());
                        let after_blind_start = after_blind_start.clone();
                        async move {
                            let blind = start.elapsed() < BLIND_START;
                            let answer = llm.complete(input, MAX_TOKENS).await;
                            if answer.is_err() && !blind {
                                after_blind_start.fetch_add(1, Ordering::Relaxed);
                            }
                            gate.observe_all(announced(&llm, &answer));
                            answer
                        }
                    };
                    let used = |c: &Completion| {
                        Cost::new().with(Dimension::TOKENS, c.input_tokens + c.output_tokens)
                    };
                    let completion = gate.call_settled(estimate, make, used).await.unwrap();
                    completion.input_tokens + completion.output_tokens
                }
            })
            .buffer_unordered(4)
            .collect::<Vec<u64>>()
    });
    let tokens = futures::future::join_all(each)
        .await
        .into_iter()
        .flatten()
        .sum();
    Run {
        refused: llm.refused(),
        refused_after_blind_start: after_blind_start.load(Ordering::Relaxed),
        tokens,
        took: start.elapsed(),
    }
}

/// The bucket's ideal: the tokens used, less its first fill, at its refill rate.
pub(super) fn ideal(tokens: u64) -> Duration {
    MINUTE.mul_f64(tokens.saturating_sub(TPM) as f64 / TPM as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_sharing_redis_spend_an_announced_bucket_as_one() {
    let (_redis, store) = store("announced-fleet").await;
    let alone = run(None).await;
    let shared = run(Some(store)).await;
    eprintln!(
        "alone: {alone:?} (ideal {:?}); shared: {shared:?} (ideal {:?})",
        ideal(alone.tokens),
        ideal(shared.tokens)
    );
    // Measured: alone 9 to 17 refused; shared 0 to 3, in 5.39 to 5.59 s where the bucket's
    // ideal was 5.21 s. Sharing nothing of the announced bucket (tried by hand), gates on one
    // store were refused 17 times. The shared refusals are calls sent 75 to 100 ms in, as
    // the first answers are read: how many depends on how quickly each gate's Redis round
    // trip follows its answer, so on the machine's load (with two busy loops beside it, up
    // to 6 in 16 runs). Once every gate has read an answer, at most one (a call sent at
    // 305 ms, once in 24 runs), where gates alone are refused 2 to 5 times after it.
    assert!(shared.refused_after_blind_start <= 1, "{shared:?}");
    assert!(
        shared.refused < alone.refused,
        "{shared:?} against {alone:?}"
    );
    let ideal = ideal(shared.tokens);
    assert!(
        shared.took < ideal.mul_f64(1.5),
        "{shared:?}, ideal {ideal:?}"
    );
}
