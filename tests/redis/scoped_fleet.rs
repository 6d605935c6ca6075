//! Gates with limits per scope, told no limit, each knowing of a tenant's token bucket only
//! what the answers to that tenant's calls announce (`observe_all_in`), call for the same two
//! tenants together: sharing a real Redis, they spend each tenant's bucket as one, where
//! gates alone each take the level an answer announced for the tenant. Real time.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use paceline::{CallOptions, Cost, Dimension, Gate, RedisStore, ScopeLimits};
use paceline_sim::{Completion, Llm, RefusedCompletion};
use tokio::time::Instant;

// Each tenant's key is that test's API: 4,000 tokens a "minute" of 2 s, a bucket that
// refills 2,000 a second.
use crate::announced_fleet::{announced, gates, ideal, llm, store};

const TENANTS: [&str; 2] = ["tenant-a", "tenant-b"];
/// Each gate's prompts for each tenant.
const PROMPTS_EACH: u64 = 12;
const MAX_TOKENS: u64 = 100;

/// What the gates' calls came to: refused by the servers, the tokens used of each tenant's
/// bucket, and how long it took.
#[derive(Debug)]
struct Run {
    refused: u64,
    tokens: [u64; 2],
    took: Duration,
}

/// The prompts of gate `g` for tenant `t`: 50 to 250 tokens.
fn prompts(g: u64, t: u64) -> impl Iterator<Item = u64> {
    let first = (2 * g + t) * PROMPTS_EACH;
    (first..first + PROMPTS_EACH).map(|i| 50 + (i * 83) % 201)
}

/// A prompt of `input` tokens through `gate` for tenant `t`, to its key `llm`, taking in
/// every budget the answer announces as the tenant's: the tokens it used.
async fn prompt(gate: Gate<RefusedCompletion>, (llm, t): (Arc<Llm>, usize), input: u64) -> u64 {
    let tenant = TENANTS[t];
    let estimate = CallOptions::new()
        .scopes([tenant])
        .cost_in(Dimension::TOKENS, input + MAX_TOKENS);
    let make = || {
        let (llm, gate) = (llm.clone(), gate.clone());
        async move {
            let answer = llm.complete(input, MAX_TOKENS).await;
            gate.observe_all_in(tenant, announced(&llm, &answer))
                .unwrap();
            answer
        }
    };
    let used =
        |c: &Completion| Cost::new().with(Dimension::TOKENS, c.input_tokens + c.output_tokens);
    let completion = gate.call_settled(estimate, make, used).await.unwrap();
    completion.input_tokens + completion.output_tokens
}

/// The gates, each with at most 2 prompts of each tenant in flight, on `store` if given
/// (else each alone).
async fn run(store: Option<RedisStore>) -> Run {
    let llms = [Arc::new(llm(5)), Arc::new(llm(6))];
    let per_tenant = ScopeLimits::new().max_in_flight(2);
    let gates = gates(store.as_ref(), |gate| gate.per_scope(per_tenant.clone()));
    let start = Instant::now();
    let each = (gates.iter().zip(0..)).flat_map(|(gate, g)| {
        let llms = llms.clone();
        (0..TENANTS.len()).map(move |t| {
            let (gate, llm) = (gate.clone(), llms[t].clone());
            let prompts = prompts(g, t as u64).map(move |input| {
                let (gate, llm) = (gate.clone(), llm.clone());
                async move { (t, prompt(gate, (llm, t), input).await) }
            });
            futures::stream::iter(prompts)
                .buffer_unordered(2)
                .collect::<Vec<_>>()
        })
    });
    let mut tokens = [0; 2];
    for (t, used) in futures::future::join_all(each).await.into_iter().flatten() {
        tokens[t] += used;
    }
    Run {
        refused: llms.iter().map(|llm| llm.refused()).sum(),
        tokens,
        took: start.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_sharing_redis_keep_each_tenants_announced_bucket_as_one() {
    let (_redis, store) = store("scoped-fleet").await;
    let alone = run(None).await;
    let shared = run(Some(store)).await;
    let ideal = ideal(shared.tokens[0].max(shared.tokens[1]));
    eprintln!("alone: {alone:?}; shared: {shared:?} (ideal {ideal:?})");
    // Measured: alone 10 to 15 refused, in 2.5 to 6.2 s; shared 0 or 1, in 1.80 to 1.93 s
    // where the larger tenant's bucket's ideal was 1.63 s. Sharing only the gate's budgets
    // (each tenant's kept by each process, as before the fleet kept a scope's), gates on one
    // store were refused 13 times, in 2.82 s.
    assert!(shared.refused <= 3, "{shared:?}");
    assert!(alone.refused > 3 * shared.refused.max(1), "{alone:?}");
    assert!(
        shared.took < ideal.mul_f64(1.5),
        "{shared:?}, ideal {ideal:?}"
    );
}
