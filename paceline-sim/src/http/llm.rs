//! The simulated LLM API over HTTP: `/v1/completions?input_tokens=N&max_tokens=M` is one
//! [`Llm::complete`], answered `200` with the answer's usage as JSON
//! (`{"usage":{"prompt_tokens":N,"completion_tokens":K,"total_tokens":N+K}}`), or `429` with
//! `Retry-After` in whole seconds (rounded up); both with the limits in the LLM's dialect.

use std::future::Future;
use std::io;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use hyper::{Request, Response, StatusCode, Uri};
use tokio::net::{TcpListener, ToSocketAddrs};

use super::{Answers, HttpServer, seconds_up, text};
use crate::Llm;

/// Serves `llm` over HTTP/1.1 on `addr`, as [`serve`](super::serve) serves a
/// [`Server`](crate::Server): in a task of its own, in real time, until the handle is dropped
/// or shut down.
///
/// # Errors
///
/// If `addr` cannot be resolved or bound.
///
/// # Examples
///
/// ```
/// use paceline_sim::Llm;
/// use paceline_sim::http::serve_llm;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let llm = Llm::builder().tokens_per_minute(1_000).seed(3).build();
/// let http = serve_llm(llm, "127.0.0.1:0").await?;
/// let client = reqwest::Client::builder().no_proxy().build()?;
/// let answer = client.post(http.completion_url(600, 300)).send().await?;
/// assert_eq!(answer.status(), 200);
/// assert_eq!(answer.headers()["x-ratelimit-remaining-tokens"], "100");
/// assert!(answer.text().await?.contains("\"prompt_tokens\":600"));
/// // 900 more do not fit in what is left.
/// let refused = client.post(http.completion_url(600, 300)).send().await?;
/// assert_eq!(refused.status(), 429);
/// # Ok(())
/// # }
/// ```
pub async fn serve_llm(llm: Llm, addr: impl ToSocketAddrs) -> io::Result<HttpServer<Llm>> {
    let listener = TcpListener::bind(addr).await?;
    HttpServer::spawn(listener, llm.clone(), llm)
}

impl HttpServer<Llm> {
    /// The URL of a completion of a prompt of `input_tokens`, answered in at most
    /// `max_tokens`.
    pub fn completion_url(&self, input_tokens: u64, max_tokens: u64) -> String {
        let addr = self.local_addr();
        format!("http://{addr}/v1/completions?input_tokens={input_tokens}&max_tokens={max_tokens}")
    }
}

impl Answers for Llm {
    fn answer(
        self,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send + 'static {
        let asked = completion(request.uri());
        async move {
            let Some((input, max)) = asked else {
                let body = "not found: call /v1/completions?input_tokens=N&max_tokens=M\n";
                return text(StatusCode::NOT_FOUND, body.to_owned());
            };
            let (status, headers, body, retry_after) = match self.complete(input, max).await {
                Ok(done) => {
                    let (prompt, completion) = (done.input_tokens, done.output_tokens);
                    let total = prompt + completion;
                    let body = format!(
                        "{{\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":\
                         {completion},\"total_tokens\":{total}}}}}\n"
                    );
                    (StatusCode::OK, done.headers, body, None)
                }
                Err(refused) => {
                    let body = "{\"error\":{\"type\":\"rate_limit_exceeded\"}}\n".to_owned();
                    let after = Some(refused.retry_after);
                    (StatusCode::TOO_MANY_REQUESTS, refused.headers, body, after)
                }
            };
            let mut response = text(status, body);
            let fields = response.headers_mut();
            fields.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes());
                if let (Ok(name), Ok(value)) = (name, HeaderValue::try_from(value)) {
                    fields.insert(name, value);
                }
            }
            if let Some(after) = retry_after {
                fields.insert(RETRY_AFTER, HeaderValue::from(seconds_up(after)));
            }
            response
        }
    }
}

/// What `/v1/completions?input_tokens=N&max_tokens=M` asks: the prompt's tokens and the
/// answer's most. `None` for another path, or without both numbers.
fn completion(uri: &Uri) -> Option<(u64, u64)> {
    if uri.path() != "/v1/completions" {
        return None;
    }
    let (mut input, mut max) = (None, None);
    for pair in uri.query()?.split('&') {
        match pair.split_once('=')? {
            ("input_tokens", n) => input = n.parse().ok(),
            ("max_tokens", n) => max = n.parse().ok(),
            _ => {}
        }
    }
    Some((input?, max?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_asks_its_prompt_and_its_most_tokens() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        let asked = |s: &str| completion(&uri(s));
        assert_eq!(
            asked("/v1/completions?input_tokens=5&max_tokens=9"),
            Some((5, 9))
        );
        assert_eq!(
            asked("/v1/completions?max_tokens=9&x=1&input_tokens=5"),
            Some((5, 9))
        );
        assert_eq!(asked("/v1/completions?input_tokens=5"), None);
        assert_eq!(asked("/v1/completions?input_tokens=x&max_tokens=9"), None);
        assert_eq!(asked("/v1/chat?input_tokens=5&max_tokens=9"), None);
        assert_eq!(asked("/v1/completions"), None);
    }
}
