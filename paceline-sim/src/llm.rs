//! A simulated LLM API: a bucket per dimension it limits (requests, tokens, input tokens,
//! output tokens, each so many a minute, refilling evenly), answers whose length is known
//! only once they end, latency that grows with the answer, and every limit announced on each
//! answer in either provider's dialect.
//!
//! A completion is admitted when each bucket has what it asks: one request, its input tokens,
//! and its `max_tokens` of output (of the tokens bucket, input and `max_tokens` together). The
//! answer's length is then drawn (seeded) up to `max_tokens`; when it ends, what it did not
//! use of `max_tokens` goes back to the tokens and output buckets. The headers are those of
//! admission, as a streamed answer's are: sent before its first token.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::{Instant, sleep};

use crate::rng::SplitMix64;
use crate::written::{go_duration, rfc3339};

/// Which provider's header fields an [`Llm`] announces its limits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LlmDialect {
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as durations
    /// (`6m0s`, `1.5s`) until the bucket is full.
    OpenAi,
    /// Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
    /// remaining,reset}`, resets as RFC 3339 times when the bucket is full.
    Anthropic,
}

/// The dimensions an [`Llm`] may limit, by the names both dialects give them.
const DIMENSIONS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];

/// Configures an [`Llm`]: its limits a minute, latency, dialect and seed.
///
/// By default: no limit, 50 ms each way, 200 ms to the first token and 10 ms for each 100
/// tokens of the answer, OpenAI's dialect, seed 0.
#[derive(Debug, Clone)]
pub struct LlmBuilder {
    per_minute: [Option<u64>; 4],
    others: u64,
    minute: Duration,
    latency: Duration,
    first_token: Duration,
    per_100_tokens: Duration,
    dialect: LlmDialect,
    seed: u64,
}

impl Default for LlmBuilder {
    fn default() -> Self {
        Self {
            per_minute: [None; 4],
            others: 0,
            minute: Duration::from_secs(60),
            latency: Duration::from_millis(50),
            first_token: Duration::from_millis(200),
            per_100_tokens: Duration::from_millis(10),
            dialect: LlmDialect::OpenAi,
            seed: 0,
        }
    }
}

impl LlmBuilder {
    /// At most `n` requests a minute.
    pub fn requests_per_minute(mut self, n: u64) -> Self {
        self.per_minute[0] = Some(n);
        self
    }

    /// At most `n` tokens (input and output together) a minute.
    pub fn tokens_per_minute(mut self, n: u64) -> Self {
        self.per_minute[1] = Some(n);
        self
    }

    /// At most `n` input tokens a minute.
    pub fn input_tokens_per_minute(mut self, n: u64) -> Self {
        self.per_minute[2] = Some(n);
        self
    }

    /// At most `n` output tokens a minute.
    pub fn output_tokens_per_minute(mut self, n: u64) -> Self {
        self.per_minute[3] = Some(n);
        self
    }

    /// Another consumer of the same key spends `n` tokens a minute of the tokens bucket,
    /// evenly, taking what there is (never refused, never more than the bucket holds). The
    /// headers still give the bucket's limit and its reset at the whole refill rate, as a
    /// provider's do: what the others spend shows only as a lower remaining count.
    pub fn other_tokens_per_minute(mut self, n: u64) -> Self {
        self.others = n;
        self
    }

    /// How long the limits' "minute" lasts: 60 s, or shorter, for a demonstration in real
    /// time that should not take minutes (each bucket then refills its limit in `minute`).
    ///
    /// # Panics
    ///
    /// If `minute` is zero.
    #[track_caller]
    pub fn minute(mut self, minute: Duration) -> Self {
        assert!(!minute.is_zero(), "`minute` must not be zero");
        self.minute = minute;
        self
    }

    /// The network's latency each way.
    pub fn latency(mut self, each_way: Duration) -> Self {
        self.latency = each_way;
        self
    }

    /// The time to an answer: `first_token`, and `per_100_tokens` for each 100 of its tokens.
    pub fn generation(mut self, first_token: Duration, per_100_tokens: Duration) -> Self {
        (self.first_token, self.per_100_tokens) = (first_token, per_100_tokens);
        self
    }

    /// The header fields the limits are announced in.
    pub fn dialect(mut self, dialect: LlmDialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// Seeds the answers' lengths.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The server, starting now with every bucket full.
    pub fn build(self) -> Llm {
        let minute = self.minute.as_nanos().max(1);
        let mut buckets = self
            .per_minute
            .map(|limit| limit.map(|limit| Bucket::full(limit, minute)));
        if let Some(tokens) = &mut buckets[1] {
            tokens.others = self.others;
        }
        Llm {
            state: Arc::new(Mutex::new(LlmState {
                buckets,
                rng: SplitMix64::new(self.seed),
                admitted: Vec::new(),
                refused: Vec::new(),
            })),
            settings: Arc::new(self),
            start: Instant::now(),
        }
    }
}

/// A bucket of `limit` units that refills `limit` a minute, evenly.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    limit: u64,
    /// A minute's nanoseconds.
    minute: u128,
    /// Units a minute that another consumer takes.
    others: u64,
    /// Units in it at `at`, times a minute's nanoseconds: it gains `limit` of these each
    /// nanosecond, so that no refill is lost to rounding.
    level: u128,
    at: Option<Instant>,
}

impl Bucket {
    fn full(limit: u64, minute: u128) -> Self {
        Self {
            limit,
            minute,
            others: 0,
            level: u128::from(limit) * minute,
            at: None,
        }
    }

    fn capacity(&self) -> u128 {
        u128::from(self.limit) * self.minute
    }

    fn refill(&mut self, now: Instant) {
        if let Some(at) = self.at {
            let nanos = (now - at).as_nanos();
            let gained = nanos * u128::from(self.limit);
            let taken = nanos * u128::from(self.others);
            self.level = (self.level + gained)
                .min(self.capacity())
                .saturating_sub(taken);
        }
        self.at = Some(now);
    }

    fn has(&self, units: u64) -> bool {
        self.level >= u128::from(units) * self.minute
    }

    fn take(&mut self, units: u64) {
        self.level = self.level.saturating_sub(u128::from(units) * self.minute);
    }

    fn give(&mut self, units: u64) {
        self.level = (self.level + u128::from(units) * self.minute).min(self.capacity());
    }

    /// Until it holds `units` (at most its limit).
    fn until(&self, units: u64) -> Duration {
        let want = u128::from(units.min(self.limit)) * self.minute;
        let nanos = want
            .saturating_sub(self.level)
            .div_ceil(u128::from(self.limit));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn remaining(&self) -> u64 {
        u64::try_from(self.level / self.minute).unwrap_or(u64::MAX)
    }
}

#[derive(Debug)]
struct LlmState {
    buckets: [Option<Bucket>; 4],
    rng: SplitMix64,
    admitted: Vec<Completion>,
    /// When each refused request arrived.
    refused: Vec<Instant>,
}

/// A simulated LLM API, running in tokio's (paused) time. Cheap to clone: clones share one
/// server. See [`Llm::complete`].
///
/// # Examples
///
/// ```
/// use paceline_sim::Llm;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let llm = Llm::builder().requests_per_minute(60).tokens_per_minute(2_000).seed(1).build();
/// let answer = llm.complete(800, 500).await.unwrap();
/// assert!(answer.output_tokens <= 500);
/// // The headers of its admission: 1,300 tokens taken of 2,000.
/// let tokens = answer.headers.iter().find(|(name, _)| name == "x-ratelimit-remaining-tokens");
/// assert_eq!(tokens.unwrap().1, "700");
/// // Another of 1,300 does not fit: refused, told to come back when it would.
/// let refused = llm.complete(800, 500).await.unwrap_err();
/// assert!(refused.retry_after > std::time::Duration::ZERO);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Llm {
    state: Arc<Mutex<LlmState>>,
    settings: Arc<LlmBuilder>,
    start: Instant,
}

/// An answer: what it used, and the header fields of its admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// When the server admitted it.
    pub admitted: Instant,
    /// The prompt's tokens.
    pub input_tokens: u64,
    /// The answer's tokens (at most the request's `max_tokens`).
    pub output_tokens: u64,
    /// The request's `max_tokens`.
    pub max_tokens: u64,
    /// The header fields that announce the limits, in the server's dialect.
    pub headers: Vec<(String, String)>,
}

/// A refused request (an HTTP 429): when to come back, and the header fields announcing the
/// limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCompletion {
    /// Until every bucket holds what the request asked.
    pub retry_after: Duration,
    /// The header fields that announce the limits, in the server's dialect.
    pub headers: Vec<(String, String)>,
}

impl Llm {
    /// Configures a server.
    pub fn builder() -> LlmBuilder {
        LlmBuilder::default()
    }

    /// The caller's side of one completion of a prompt of `input_tokens`, answered in at
    /// most `max_tokens`: resolves when the whole answer is in (or at once, after the round
    /// trip, if refused).
    pub async fn complete(
        &self,
        input_tokens: u64,
        max_tokens: u64,
    ) -> Result<Completion, RefusedCompletion> {
        let settings = &self.settings;
        sleep(settings.latency).await;
        let now = Instant::now();
        let asks = [1, input_tokens + max_tokens, input_tokens, max_tokens];
        let admitted = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let buckets = &mut state.buckets;
            buckets.iter_mut().flatten().for_each(|b| b.refill(now));
            let short = buckets.iter().zip(asks).filter_map(|(b, ask)| {
                let b = b.as_ref()?;
                (!b.has(ask)).then(|| b.until(ask))
            });
            match short.max() {
                Some(wait) => {
                    state.refused.push(now);
                    let headers = self.headers(&state.buckets, now);
                    Err(RefusedCompletion {
                        retry_after: wait,
                        headers,
                    })
                }
                None => {
                    for (bucket, ask) in state.buckets.iter_mut().zip(asks) {
                        if let Some(bucket) = bucket {
                            bucket.take(ask);
                        }
                    }
                    let output_tokens = 1 + state.rng.up_to(max_tokens.max(1) - 1);
                    let headers = self.headers(&state.buckets, now);
                    Ok(Completion {
                        admitted: now,
                        input_tokens,
                        output_tokens: output_tokens.min(max_tokens),
                        max_tokens,
                        headers,
                    })
                }
            }
        };
        let completion = match admitted {
            Ok(completion) => completion,
            Err(refused) => {
                sleep(settings.latency).await;
                return Err(refused);
            }
        };
        let generating = settings
            .per_100_tokens
            .mul_f64(completion.output_tokens as f64 / 100.0);
        sleep(settings.first_token + generating).await;
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let unused = completion.max_tokens - completion.output_tokens;
            for index in [1, 3] {
                if let Some(bucket) = &mut state.buckets[index] {
                    bucket.refill(now);
                    bucket.give(unused);
                }
            }
            state.admitted.push(completion.clone());
        }
        sleep(settings.latency).await;
        Ok(completion)
    }

    /// The answers admitted so far, in the order they ended.
    pub fn completions(&self) -> Vec<Completion> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.admitted.clone()
    }

    /// How many requests were refused.
    pub fn refused(&self) -> u64 {
        self.refusals().len() as u64
    }

    /// When each refused request arrived, in order.
    pub fn refusals(&self) -> Vec<Instant> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refused
            .clone()
    }

    /// The wall-clock time the server's RFC 3339 resets count from: a fixed day when it
    /// started, plus the time since. Hand it to a reader of Anthropic's headers.
    pub fn wall_clock(&self) -> SystemTime {
        epoch() + (Instant::now() - self.start)
    }

    fn headers(&self, buckets: &[Option<Bucket>; 4], now: Instant) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        for (name, bucket) in DIMENSIONS.iter().zip(buckets) {
            let Some(bucket) = bucket else { continue };
            let full_in = bucket.until(bucket.limit);
            let (limit, remaining) = (bucket.limit.to_string(), bucket.remaining().to_string());
            match self.settings.dialect {
                LlmDialect::OpenAi if index_of(name) < 2 => {
                    headers.push((format!("x-ratelimit-limit-{name}"), limit));
                    headers.push((format!("x-ratelimit-remaining-{name}"), remaining));
                    headers.push((
                        format!("x-ratelimit-reset-{name}"),
                        go_duration(to_millis(full_in)),
                    ));
                }
                LlmDialect::OpenAi => {}
                LlmDialect::Anthropic => {
                    let at = epoch() + (now - self.start) + full_in;
                    headers.push((format!("anthropic-ratelimit-{name}-limit"), limit));
                    headers.push((format!("anthropic-ratelimit-{name}-remaining"), remaining));
                    headers.push((format!("anthropic-ratelimit-{name}-reset"), rfc3339(at)));
                }
            }
        }
        headers
    }
}

fn index_of(name: &str) -> usize {
    DIMENSIONS
        .iter()
        .position(|d| *d == name)
        .unwrap_or(usize::MAX)
}

/// 2026-01-01T00:00:00Z, the day a server's wall clock starts.
fn epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// `d` cut to whole milliseconds, as OpenAI writes its resets.
fn to_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
