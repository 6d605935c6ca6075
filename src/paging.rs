//! A paged remote listing (search results, reports) as a `Stream` of rows, each page fetched
//! through a gate.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::stream::{FusedStream, Stream};
use pin_project::pin_project;

use crate::error::Error;
use crate::gate::{Attempt, Gate, Outcome};

/// One page of a listing: its rows, and the token of the next page (`None` on the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<Row, Token> {
    /// The rows of this page, in order.
    pub rows: Vec<Row>,
    /// Where the next page starts; `None` if this is the last.
    pub next: Option<Token>,
}

/// Stream for [`Gate::paged`]: the rows of a paged listing.
#[must_use = "streams do nothing unless polled"]
#[pin_project]
pub struct Paged<E, F, Fut, Row, Token> {
    gate: Gate<E>,
    fetch: F,
    rows: VecDeque<Row>,
    /// How many of `rows` came from the newest page: another fetch starts only once every
    /// buffered row is from it, so the stream is never more than one page ahead.
    newest: usize,
    /// An error to yield once the rows fetched before it are taken.
    failed: Option<Error<E>>,
    /// The token of the page being fetched, kept for a retry.
    token: Option<Option<Token>>,
    attempts: u32,
    #[pin]
    pending: Option<Attempt<E, Fut>>,
    done: bool,
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
        Paged {
            gate: self.clone(),
            fetch,
            rows: VecDeque::new(),
            newest: 0,
            failed: None,
            token: Some(None),
            attempts: 0,
            pending: None,
            done: false,
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
            let may_fetch = !*this.done && this.rows.len() <= *this.newest;
            if this.pending.is_none() && may_fetch {
                if let Some(token) = this.token.clone() {
                    *this.attempts += 1;
                    let fut = (this.fetch)(token);
                    let retry = *this.attempts > 1;
                    this.pending.set(Some(Attempt::new(
                        this.gate.clone(),
                        Box::new([]),
                        retry,
                        fut,
                    )));
                }
            }
            // The page ahead progresses while rows are handed out.
            if let Some(pending) = this.pending.as_mut().as_pin_mut() {
                if let Poll::Ready(outcome) = pending.poll(cx) {
                    this.pending.set(None);
                    match outcome {
                        Outcome::Done(page) => {
                            *this.newest = page.rows.len();
                            this.rows.extend(page.rows);
                            *this.token = page.next.map(Some);
                            *this.attempts = 0;
                        }
                        Outcome::Failed(error) => *this.failed = Some(Error::Call(error)),
                        Outcome::Throttled(error) => {
                            *this.failed = this.gate.retry_or_give_up(*this.attempts, error);
                        }
                    }
                    *this.done |= this.failed.is_some();
                    continue;
                }
            }
            if let Some(row) = this.rows.pop_front() {
                *this.newest = (*this.newest).min(this.rows.len());
                return Poll::Ready(Some(Ok(row)));
            }
            if this.pending.is_some() {
                return Poll::Pending;
            }
            *this.done = true;
            return Poll::Ready(this.failed.take().map(Err));
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
        self.done && self.rows.is_empty() && self.failed.is_none() && self.pending.is_none()
    }
}

impl<E, F, Fut, Row: fmt::Debug, Token: fmt::Debug> fmt::Debug for Paged<E, F, Fut, Row, Token> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paged")
            .field("rows", &self.rows)
            .field("token", &self.token)
            .field("attempts", &self.attempts)
            .field("fetching", &self.pending.is_some())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
