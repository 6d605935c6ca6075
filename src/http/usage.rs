//! What an LLM answer's body says it used: its `usage` object, in OpenAI's fields or
//! Anthropic's, as a [`Cost`] in each token dimension it names.

use serde_json::Value;

use crate::{Cost, Dimension};

/// What the answer whose JSON body is `body` says it used, from its `usage` object, or `None`
/// if it has none with a token count: the [`Cost`] to settle the call with
/// ([`Settle::used`](crate::Settle::used), or the reader given to
/// [`Gate::call_settled`](crate::Gate::call_settled)).
///
/// It reads:
///
/// - OpenAI's Chat Completions (`prompt_tokens`, `completion_tokens`, `total_tokens`) and
///   Responses (`input_tokens`, `output_tokens`, `total_tokens`) fields;
/// - Anthropic's (`input_tokens`, `output_tokens`, and `cache_creation_input_tokens`, which
///   count among the input tokens a minute; `cache_read_input_tokens` do not, and are left
///   out).
///
/// The cost names [`Dimension::INPUT_TOKENS`] and [`Dimension::OUTPUT_TOKENS`] where the body
/// gives them, and [`Dimension::TOKENS`] as `total_tokens` says, or else as the input and
/// output together. A dimension the body does not give is left as the call estimated it. A
/// body that is not JSON, or whose `usage` holds no count, gives `None`: settle as estimated
/// then, never as nothing. A streamed answer's usage comes in its last event (OpenAI's with
/// `stream_options.include_usage`, Anthropic's `message_delta`): pass that event's JSON.
///
/// # Examples
///
/// ```
/// use paceline::{Cost, Dimension};
///
/// let body = br#"{"id":"chatcmpl-1","usage":{"prompt_tokens":812,"completion_tokens":95,"total_tokens":907}}"#;
/// let used = paceline::http::usage(body).unwrap();
/// assert_eq!(used.get(&Dimension::TOKENS), Some(907));
/// assert_eq!(used.get(&Dimension::INPUT_TOKENS), Some(812));
/// assert_eq!(used.get(&Dimension::OUTPUT_TOKENS), Some(95));
/// assert!(paceline::http::usage(b"<html>busy</html>").is_none());
/// ```
///
/// With the reqwest middleware, settling a request from its answer's body in one line:
///
/// ```no_run
/// use paceline::{CallOptions, Dimension, Settle};
///
/// # async fn example(client: reqwest_middleware::ClientWithMiddleware) -> Result<(), Box<dyn std::error::Error>> {
/// let estimate = CallOptions::new().cost_in(Dimension::TOKENS, 1_300);
/// let answer = client
///     .post("https://api.openai.com/v1/chat/completions")
///     .with_extension(estimate)
///     .send()
///     .await?;
/// let settle = Settle::of(answer.extensions());
/// let body = answer.bytes().await?;
/// if let (Some(settle), Some(used)) = (settle, paceline::http::usage(&body)) {
///     settle.used(used);
/// }
/// # Ok(())
/// # }
/// ```
pub fn usage(body: &[u8]) -> Option<Cost> {
    let json: Value = serde_json::from_slice(body).ok()?;
    let usage = json.get("usage")?;
    let count = |name: &str| usage.get(name).and_then(Value::as_u64);
    let input = count("prompt_tokens").or_else(|| count("input_tokens"));
    let cache_creation = count("cache_creation_input_tokens").unwrap_or(0);
    let input = input.map(|input| input.saturating_add(cache_creation));
    let output = count("completion_tokens").or_else(|| count("output_tokens"));
    let total = count("total_tokens").or_else(|| match (input, output) {
        (Some(input), Some(output)) => Some(input.saturating_add(output)),
        (one, other) => one.or(other),
    });
    let mut cost = Cost::new();
    for (dimension, units) in [
        (Dimension::TOKENS, total),
        (Dimension::INPUT_TOKENS, input),
        (Dimension::OUTPUT_TOKENS, output),
    ] {
        if let Some(units) = units {
            cost = cost.with(dimension, units);
        }
    }
    total.map(|_| cost)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn read(body: &str) -> Option<[Option<u64>; 3]> {
        let cost = usage(body.as_bytes())?;
        Some([
            cost.get(&Dimension::TOKENS),
            cost.get(&Dimension::INPUT_TOKENS),
            cost.get(&Dimension::OUTPUT_TOKENS),
        ])
    }

    #[test]
    fn each_providers_usage_is_read_in_every_token_dimension_it_gives() {
        // OpenAI's Chat Completions; its total as it says, though not the sum.
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":812,"completion_tokens":95,
            "total_tokens":910,"completion_tokens_details":{"reasoning_tokens":3}}}"#;
        assert_eq!(read(chat), Some([Some(910), Some(812), Some(95)]));
        // OpenAI's Responses.
        let responses = r#"{"usage":{"input_tokens":40,"output_tokens":2,"total_tokens":42}}"#;
        assert_eq!(read(responses), Some([Some(42), Some(40), Some(2)]));
        // Anthropic's: a cache write counts among the input, a cache read does not.
        let messages = r#"{"type":"message","usage":{"input_tokens":100,
            "cache_creation_input_tokens":20,"cache_read_input_tokens":500,"output_tokens":7}}"#;
        assert_eq!(read(messages), Some([Some(127), Some(120), Some(7)]));
        // A streamed answer's last event: Anthropic's message_delta gives the output only.
        let delta = r#"{"type":"message_delta","usage":{"output_tokens":15}}"#;
        assert_eq!(read(delta), Some([Some(15), None, Some(15)]));
    }

    #[test]
    fn a_body_with_no_count_says_nothing() {
        for body in [
            "",
            "not json",
            "[1,2]",
            r#"{"choices":[]}"#,
            r#"{"usage":null}"#,
            r#"{"usage":{}}"#,
            r#"{"usage":{"total_tokens":-1}}"#,
            r#"{"usage":{"total_tokens":"12"}}"#,
            r#"{"usage":{"total_tokens":1.5}}"#,
        ] {
            assert_eq!(read(body), None, "{body}");
        }
    }

    proptest! {
        /// Any bytes at all: no panic, and a count only where the body gave one.
        #[test]
        fn any_body_is_read_without_panic(body in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Some(cost) = usage(&body) {
                prop_assert!(String::from_utf8_lossy(&body).contains("usage"));
                prop_assert!(cost.get(&Dimension::TOKENS).is_some());
            }
        }
    }
}
