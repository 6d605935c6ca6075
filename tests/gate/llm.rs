//! The LLM scenario: a simulated LLM API that limits requests and tokens a minute and
//! announces both on every answer, called with a batch of prompts by three clients in the
//! same run: a gate that reads every announced budget and draws each prompt's tokens, one that
//! paces requests at the stated request limit only, and one that reads nothing; in paused
//! time, in either provider's dialect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use paceline::{Budget, CallOptions, Cost, Dimension, Gate, GateBuilder, RateLimited, Window};
use paceline_sim::{Llm, LlmDialect, RefusedCompletion};
use tokio::time::Instant;

/// The server's limits: tokens bind long before requests.
const RPM: u64 = 500;
const TPM: u64 = 20_000;
const PROMPTS: u64 = 120;
const MAX_TOKENS: u64 = 600;

/// How each client paces.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Client {
    /// Told both limits; reads every announced budget, draws each prompt's tokens, settles
    /// what it used.
    EveryDimension,
    /// As `EveryDimension`, but told no limit: it knows of the buckets only what answers
    /// announce.
    HeadersOnly,
    /// As `EveryDimension`, but reading no header: it knows the limits it was told.
    ToldOnly,
    /// Paces requests at the stated request limit, reads nothing.
    RequestsOnly,
    /// Neither: only its in-flight limit, and each 429's Retry-After.
    Unpaced,
}

/// What a run came to.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    elapsed: f64,
    refused: u64,
    /// Tokens the answers used, input and output.
    tokens: u64,
}

/// The prompts' input lengths, the same for every client: 200 to 1,400 tokens.
fn prompts() -> Vec<u64> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..PROMPTS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            200 + x % 1_201
        })
        .collect()
}

fn builder() -> GateBuilder<RefusedCompletion> {
    Gate::builder(|refused: &RefusedCompletion| {
        Some(RateLimited::new().retry_after(refused.retry_after))
    })
    .max_in_flight(16)
    .max_retries(50)
    .quota_reserve(0)
}

async fn run(client: Client, dialect: LlmDialect, others: u64) -> Run {
    let llm = Llm::builder()
        .requests_per_minute(RPM)
        .tokens_per_minute(TPM)
        .other_tokens_per_minute(others)
        .dialect(dialect)
        .seed(7)
        .build();
    let minute = |dimension, n| Budget::per_minute(dimension, n).window(Window::Refilling);
    let gate = match client {
        Client::EveryDimension | Client::ToldOnly => builder()
            .budget(minute(Dimension::REQUESTS, RPM))
            .budget(minute(Dimension::TOKENS, TPM)),
        Client::RequestsOnly => builder().rate(RPM as f64 / 60.0),
        Client::HeadersOnly | Client::Unpaced => builder(),
    }
    .build()
    .unwrap();
    let reads_headers = matches!(client, Client::EveryDimension | Client::HeadersOnly);
    let start = Instant::now();
    let used = Arc::new(AtomicU64::new(0));
    let heard = Arc::new(Mutex::new(0));
    futures::stream::iter(prompts())
        .map(|input| {
            let (llm, gate, used, heard) = (llm.clone(), gate.clone(), used.clone(), heard.clone());
            async move {
                let estimate = CallOptions::new().cost_in(Dimension::TOKENS, input + MAX_TOKENS);
                let make = || {
                    let (llm, gate, heard) = (llm.clone(), gate.clone(), heard.clone());
                    async move {
                        let answer = llm.complete(input, MAX_TOKENS).await;
                        if reads_headers {
                            let headers = match &answer {
                                Ok(completion) => &completion.headers,
                                Err(refused) => &refused.headers,
                            };
                            let map = header_map(headers);
                            let announced = paceline::http::announced_at(&map, llm.wall_clock());
                            *heard.lock().unwrap() += announced.len();
                            gate.observe_all(announced);
                        }
                        answer
                    }
                };
                let settle = |c: &paceline_sim::Completion| {
                    Cost::new().with(Dimension::TOKENS, c.input_tokens + c.output_tokens)
                };
                let completion = gate.call_settled(estimate, make, settle).await.unwrap();
                used.fetch_add(
                    completion.input_tokens + completion.output_tokens,
                    Ordering::Relaxed,
                );
            }
        })
        .buffer_unordered(PROMPTS as usize)
        .collect::<Vec<()>>()
        .await;
    if reads_headers {
        assert!(
            *heard.lock().unwrap() >= 2 * PROMPTS as usize,
            "every answer announced both"
        );
    }
    Run {
        elapsed: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        refused: llm.refused(),
        tokens: used.load(Ordering::Relaxed),
    }
}

fn header_map(headers: &[(String, String)]) -> http::HeaderMap {
    headers
        .iter()
        .map(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            (name, http::HeaderValue::from_str(value).unwrap())
        })
        .collect()
}

/// The binding dimension's ideal: the tokens used, less the bucket's first fill, at its
/// refill rate.
fn ideal(tokens: u64) -> f64 {
    (tokens.saturating_sub(TPM)) as f64 * 60.0 / TPM as f64
}

async fn scenario(dialect: LlmDialect) -> [Run; 4] {
    let clients = [
        Client::EveryDimension,
        Client::HeadersOnly,
        Client::RequestsOnly,
        Client::Unpaced,
    ];
    let mut runs = Vec::new();
    for client in clients {
        let run = run(client, dialect, 0).await;
        println!(
            "{dialect:?} {client:?}: {:.1} s (ideal {:.1} s), {} refused, {} tokens",
            run.elapsed,
            ideal(run.tokens),
            run.refused,
            run.tokens
        );
        runs.push(run);
    }
    runs.try_into().unwrap()
}

#[tokio::test(start_paused = true)]
async fn llm_openai_a_gate_reading_every_dimension_is_never_refused() {
    let [every, headers, requests, unpaced] = scenario(LlmDialect::OpenAi).await;
    // The same prompts and answers (the server's seed) for all three.
    assert_eq!(every.tokens, requests.tokens);
    assert_eq!(every.tokens, unpaced.tokens);
    // docs/scenarios.md's table, exactly (the simulation repeats itself).
    let figures = |run: &Run| (run.elapsed, run.refused);
    assert_eq!(every.tokens, 137_122);
    assert_eq!(figures(&every), (352.9, 0));
    assert_eq!(figures(&headers), (352.9, 3));
    assert_eq!(figures(&requests), (353.0, 102));
    assert_eq!(figures(&unpaced), (353.0, 148));
    // What must hold whatever the figures: never refused, within 25 % of the ideal.
    assert_eq!(every.refused, 0);
    assert!(requests.refused > 0 && unpaced.refused > 0);
    let slack = every.elapsed / ideal(every.tokens);
    assert!(slack < 1.25, "{slack:.2} of the binding dimension's ideal");
}

#[tokio::test(start_paused = true)]
async fn llm_anthropic_a_gate_reading_every_dimension_is_never_refused() {
    let [every, headers, requests, unpaced] = scenario(LlmDialect::Anthropic).await;
    let figures = |run: &Run| (run.elapsed, run.refused);
    assert_eq!(figures(&every), (352.9, 0));
    assert_eq!(figures(&headers), (352.9, 3));
    assert_eq!(every.refused, 0);
    assert!(requests.refused > 0 && unpaced.refused > 0);
    let slack = every.elapsed / ideal(every.tokens);
    assert!(slack < 1.25, "{slack:.2} of the binding dimension's ideal");
}

/// Another consumer of the same key spends 10, 30 or 50 % of the tokens a minute, evenly. The
/// gate told the limits alone overspends and is refused; reading the answers, it reads the
/// others' pace from what the bucket fell by beyond its own spending, and keeps to what they
/// leave.
#[tokio::test(start_paused = true)]
async fn llm_other_consumers_leave_the_gate_what_they_do_not_take() {
    let mut figures = Vec::new();
    for percent in [10, 30, 50] {
        let others = TPM * percent / 100;
        for client in [
            Client::EveryDimension,
            Client::ToldOnly,
            Client::HeadersOnly,
        ] {
            let run = run(client, LlmDialect::OpenAi, others).await;
            // What the bucket holds at the start, then what the others leave, at its pace.
            let ideal = run.tokens.saturating_sub(TPM) as f64 * 60.0 / (TPM - others) as f64;
            println!(
                "others {percent} %, {client:?}: {:.1} s (ideal {ideal:.1} s), {} refused",
                run.elapsed, run.refused
            );
            if client != Client::ToldOnly {
                let slack = run.elapsed / ideal;
                assert!(slack < 1.02, "{client:?}: {slack:.3} of the ideal");
            }
            figures.push((run.elapsed, run.refused));
        }
    }
    // docs/scenarios.md's figures, exactly (the simulation repeats itself).
    assert_eq!(
        figures,
        [
            (392.0, 1),
            (392.5, 8),
            (392.0, 14),
            (504.0, 1),
            (506.7, 32),
            (504.0, 17),
            (705.4, 1),
            (708.2, 68),
            (705.4, 17),
        ]
    );
}
