//! A paged remote listing (search results, reports) as a `Stream` of rows, each page fetched
//! through a gate.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::stream::{FusedStream, Stream};
use pin_project::pin_project;
use tokio::time::Instant;

use crate::error::Error;
use crate::gate::Gate;
use crate::gate::call::{Arrival, Call, Turn};
use crate::gate::ended::Estimated;
use crate::gate::options::CallOptions;
use crate::gate::state::Shared;

/// One page of a listing: its rows, and the token of the next page (`None` on the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<Row, Token> {
    /// The rows of this page, in order.
    pub rows: Vec<Row>,
    /// Where the next page starts; `None` if this is the last.
    pub next: Option<Token>,
}

/// Stream for [`Gate::paged`] and [`Gate::paged_with`]: the rows of a paged listing.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct Paged<E, F, Fut: Future, Row, Token> {
    gate: Gate<E>,
    /// What each page's call is: its scopes, cost, priority and how long it may wait.
    options: CallOptions,
    fetch: F,
    rows: VecDeque<Row>,
    /// How many of `rows` came from the newest page: another fetch starts only once every
    /// buffered row is from it, so the stream is never more than one page ahead.
    newest: usize,
    #[pin]
    state: State<E, Fut, Token>,
}

/// Where the listing stands.
#[pin_project(project = StateProj)]
enum State<E, Fut: Future, Token> {
    /// The page at `token` is next (`None`: the first page), fetched once the rows allow.
    Next { token: Option<Token> },
    /// The page at `token` is being fetched.
    Fetching {
        token: Option<Token>,
        #[pin]
        call: Call<Arc<Shared<E>>, E, Fut, Estimated, Instant>,
    },
    /// No page is left to fetch; `failed` is yielded once the rows before it are taken.
    Ended { failed: Option<Error<E>> },
    /// The end was handed out.
    Done,
}

impl<E> Gate<E> {
    /// Turns "fetch the page at this token → rows and the next token" into a `Stream` of rows.
    ///
    /// `fetch(None)` fetches the first page, `fetch(Some(token))` the one a previous page
    /// pointed to. Each fetch goes through the gate like any call (in line, within the limits,
    /// backoffs and rate). The next page is fetched while the rows of the current one are
    /// being taken, never more than one page ahead, and not at all if the consumer stops. A
    /// throttled fetch is retried for the same token, so no row is lost or repeated; if the
    /// gate gives up or the fetch fails otherwise, the error is yielded and the stream ends.
    /// So does a fetch the gate turns away, its [line full](crate::GateBuilder::max_queued)
    /// ([`Error::Overloaded`]): that page is never fetched, and the rows before it are all
    /// yielded first.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use paceline::{Gate, Page};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let gate: Gate<String> = Gate::builder(|_: &String| None).build().unwrap();
    /// // A listing of 0..7, three rows a page, the token being the next offset.
    /// let rows: Vec<u32> = gate
    ///     .paged(|token: Option<u32>| async move {
    ///         let from = token.unwrap_or(0);
    ///         let rows: Vec<u32> = (from..(from + 3).min(7)).collect();
    ///         let next = (from + 3 < 7).then_some(from + 3);
    ///         Ok::<_, String>(Page { rows, next })
    ///     })
    ///     .map(Result::unwrap)
    ///     .collect()
    ///     .await;
    /// assert_eq!(rows, [0, 1, 2, 3, 4, 5, 6]);
    /// # }
    /// ```
    pub fn paged<F, Fut, Row, Token>(&self, fetch: F) -> Paged<E, F, Fut, Row, Token>
    where
        F: FnMut(Option<Token>) -> Fut,
        Fut: Future<Output = Result<Page<Row, Token>, E>>,
        Token: Clone,
    {
        self.paged_with(CallOptions::new(), fetch)
    }

    /// Like [`paged`](Self::paged), each page's fetch a call made with `options`, as
    /// [`call_with`](Self::call_with) makes one: of the scopes they name (a tenant's listing
    /// takes its turns with the other tenants', and waits for its scopes' limits, backoffs
    /// and announced budgets), at their cost and priority; a deadline they give by
    /// [`max_wait`](CallOptions::max_wait) counts from when each page's fetch is made.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use paceline::{CallOptions, Gate, Page, ScopeLimits};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Each account may fetch a page a second; the whole client, any number.
    /// let gate: Gate<String> = Gate::builder(|_: &String| None)
    ///     .per_scope(ScopeLimits::new().rate(1.0))
    ///     .build()
    ///     .unwrap();
    /// let start = tokio::time::Instant::now();
    /// let listing = |account: &'static str| {
    ///     gate.paged_with(CallOptions::new().scopes([account]), |page: Option<u32>| async move {
    ///         let page = page.unwrap_or(0);
    ///         let next = (page < 2).then_some(page + 1);
    ///         Ok::<_, String>(Page { rows: vec![(page, start.elapsed())], next })
    ///     })
    /// };
    /// let (a, b): (Vec<_>, Vec<_>) = futures::join!(
    ///     listing("a").map(Result::unwrap).collect(),
    ///     listing("b").map(Result::unwrap).collect(),
    /// );
    /// // Each account's three pages a second apart, the two accounts side by side.
    /// let secs = |s| Duration::from_secs(s);
    /// assert_eq!(a, [(0, secs(0)), (1, secs(1)), (2, secs(2))]);
    /// assert_eq!(b, a);
    /// # }
    /// ```
    pub fn paged_with<F, Fut, Row, Token>(
        &self,
        options: CallOptions,
        fetch: F,
    ) -> Paged<E, F, Fut, Row, Token>
    where
        F: FnMut(Option<Token>) -> Fut,
        Fut: Future<Output = Result<Page<Row, Token>, E>>,
        Token: Clone,
    {
        Paged {
            gate: self.clone(),
            options,
            fetch,
            rows: VecDeque::new(),
            newest: 0,
            state: State::Next { token: None },
        }
    }
}

impl<E, F, Fut, Row, Token> Stream for Paged<E, F, Fut, Row, Token>
where
    F: FnMut(Option<Token>) -> Fut,
    Fut: Future<Output = Result<Page<Row, Token>, E>>,
    Token: Clone,
{
    type Item = Result<Row, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Next { token } if this.rows.len() <= *this.newest => {
                    let shared = Arc::clone(this.gate.shared());
                    let (scopes, terms) = (
                        this.options.scopes.clone(),
                        this.options.terms(Instant::now),
                    );
                    // The page is fetched only if the gate lets the call in.
                    Some(match Arrival::new(shared, scopes, terms, Estimated) {
                        Ok(arrival) => {
                            let token = token.take();
                            let call = arrival.attempt((this.fetch)(token.clone()));
                            State::Fetching { token, call }
                        }
                        Err(refused) => State::Ended {
                            failed: Some(refused.into_error()),
                        },
                    })
                }
                // The page ahead progresses while rows are handed out.
                StateProj::Fetching { token, mut call } => match call.as_mut().poll(cx) {
                    Poll::Ready(Turn::Ended(ended)) => match ended.into_result() {
                        Ok(page) => {
                            *this.newest = page.rows.len();
                            this.rows.extend(page.rows);
                            Some(match page.next {
                                Some(token) => State::Next { token: Some(token) },
                                None => State::Ended { failed: None },
                            })
                        }
                        Err(error) => Some(State::Ended {
                            failed: Some(error),
                        }),
                    },
                    // The same page again: no row is lost or repeated.
                    Poll::Ready(Turn::Again(retry)) => {
                        let token = token.take();
                        let call = retry.attempt((this.fetch)(token.clone()));
                        Some(State::Fetching { token, call })
                    }
                    Poll::Pending => None,
                },
                StateProj::Next { .. } | StateProj::Ended { .. } | StateProj::Done => None,
            };
            if let Some(next) = next {
                this.state.set(next);
                continue;
            }
            if let Some(row) = this.rows.pop_front() {
                *this.newest = (*this.newest).min(this.rows.len());
                return Poll::Ready(Some(Ok(row)));
            }
            return match this.state.as_mut().project() {
                StateProj::Ended { failed } => match failed.take() {
                    Some(error) => Poll::Ready(Some(Err(error))),
                    None => {
                        this.state.set(State::Done);
                        Poll::Ready(None)
                    }
                },
                StateProj::Done => Poll::Ready(None),
                StateProj::Next { .. } | StateProj::Fetching { .. } => Poll::Pending,
            };
        }
    }
}

impl<E, F, Fut, Row, Token> FusedStream for Paged<E, F, Fut, Row, Token>
where
    F: FnMut(Option<Token>) -> Fut,
    Fut: Future<Output = Result<Page<Row, Token>, E>>,
    Token: Clone,
{
    fn is_terminated(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl<E, F, Fut: Future, Row: fmt::Debug, Token: fmt::Debug> fmt::Debug
    for Paged<E, F, Fut, Row, Token>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Next { token } => format!("next page at {token:?}"),
            State::Fetching { token, call } => {
                format!("fetching the page at {token:?}: {call:?}")
            }
            State::Ended { failed } => format!("ended (failed: {})", failed.is_some()),
            State::Done => "done".to_owned(),
        };
        f.debug_struct("Paged")
            .field("rows", &self.rows)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
