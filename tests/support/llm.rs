//! The LLM scenario, shared by its test (`tests/gate/llm.rs`) and its picture
//! (`examples/scenarios.rs`): a simulated LLM API that limits requests and tokens a minute
//! and announces both on every answer, called with a batch of prompts by clients that pace in
//! different ways, in paused time.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use paceline::{Budget, CallOptions, Cost, Dimension, Gate, GateBuilder, RateLimited, Window};
use paceline_sim::{Llm, LlmDialect, RefusedCompletion};
use tokio::time::Instant;

/// The server's limits: tokens bind long before requests.
pub const RPM: u64 = 500;
pub const TPM: u64 = 20_000;
pub const PROMPTS: u64 = 120;
pub const MAX_TOKENS: u64 = 600;

/// How each client paces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Client {
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
pub struct Run {
    pub elapsed: f64,
    pub refused: u64,
    /// Tokens the answers used, input and output.
    pub tokens: u64,
    /// When the server admitted each prompt (since the start), with the tokens it used.
    pub admitted: Vec<(Duration, u64)>,
    /// When the server refused a prompt (since the start).
    pub refusals: Vec<Duration>,
}

/// The prompts' input lengths, the same for every client: 200 to 1,400 tokens.
pub fn prompts() -> Vec<u64> {
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

pub async fn run(client: Client, dialect: LlmDialect, others: u64) -> Run {
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
    let since = |at: Instant| at.saturating_duration_since(start);
    let admitted = (llm.completions().iter())
        .map(|c| (since(c.admitted), c.input_tokens + c.output_tokens))
        .collect();
    Run {
        elapsed: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        refused: llm.refused(),
        tokens: used.load(Ordering::Relaxed),
        admitted,
        refusals: llm.refusals().into_iter().map(since).collect(),
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
pub fn ideal(tokens: u64) -> f64 {
    (tokens.saturating_sub(TPM)) as f64 * 60.0 / TPM as f64
}

/// The picture's title.
pub const PICTURE_TITLE: &str =
    "An LLM API, 20,000 tokens a minute, 30 % taken by another consumer: 120 prompts";

/// The picture's runs: the gate told both limits and reading every announced budget, the
/// same gate reading no header, and a gate told no limit, reading them; another consumer
/// taking 30 % of the tokens.
pub async fn picture_runs() -> Vec<(Client, Run)> {
    let mut runs = Vec::new();
    for client in [
        Client::EveryDimension,
        Client::ToldOnly,
        Client::HeadersOnly,
    ] {
        runs.push((client, run(client, LlmDialect::OpenAi, TPM * 3 / 10).await));
    }
    runs
}

/// What each client of the picture is.
fn described(client: Client) -> &'static str {
    match client {
        Client::EveryDimension => "told both limits, reading every announced budget",
        Client::ToldOnly => "told both limits, reading no header",
        Client::HeadersOnly => "told no limit, reading every announced budget",
        Client::RequestsOnly => "pacing requests at the request limit",
        Client::Unpaced => "reading nothing",
    }
}

/// The picture of `runs`, as SVG: the tokens the prompts used per second (30 s bins, counted
/// when admitted) beside the server's refill and what the other consumer leaves, each refusal
/// marked.
pub fn picture(runs: &[(Client, Run)]) -> Result<String, Box<dyn std::error::Error>> {
    use super::plot::{TokensPanel, tokens_svg};
    let panels: Vec<TokensPanel<'_>> = (runs.iter())
        .map(|(client, run)| TokensPanel {
            caption: format!(
                "{}: {:.1} s, {} refused",
                described(*client),
                run.elapsed,
                run.refused
            ),
            admitted: &run.admitted,
            refusals: &run.refusals,
        })
        .collect();
    let longest = runs.iter().map(|(_, run)| run.elapsed).fold(0.0, f64::max);
    let end = Duration::from_secs_f64(longest.ceil());
    let (limit, left) = (TPM as f64 / 60.0, TPM as f64 * 0.7 / 60.0);
    tokens_svg(
        PICTURE_TITLE,
        &panels,
        (limit, Some(left)),
        (end, Duration::from_secs(30)),
    )
}
