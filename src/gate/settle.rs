//! What a call drew of its gate, kept past the call's end by a front-end (the reqwest
//! middleware, the tower layer) so that its user can settle what it really cost once the
//! answer's body is read.

use std::fmt;
use std::sync::Arc;

use super::answering::Started;
use super::classify::Scope;
use super::core::Sent;
use super::dimensions::{Cost, Draws};
use super::state::Shared;

/// What a request sent through a front-end with [`CallOptions`](crate::CallOptions) drew of
/// the gate, handed over with its answer (the reqwest middleware puts it in the answer's
/// extensions; the tower layer gives it to [`GateLayer::settle`](crate::tower::GateLayer::settle)),
/// to settle what it really cost once that is known (an LLM answer's `usage`, in its body or
/// headers): what it cost more is charged, what it cost less given back, in each dimension,
/// as [`Gate::call_settled`](crate::Gate::call_settled) does for a call whose value says it.
/// Dropped unused, the request stays charged as estimated.
///
/// # Examples
///
/// With the reqwest middleware:
///
/// ```no_run
/// use paceline::{CallOptions, Dimension, Settle};
///
/// # async fn example(client: reqwest_middleware::ClientWithMiddleware) -> Result<(), Box<dyn std::error::Error>> {
/// // A prompt of 800 tokens, answered in at most 500.
/// let estimate = CallOptions::new().cost_in(Dimension::TOKENS, 1_300);
/// let answer = client
///     .post("https://api.example.com/v1/chat/completions")
///     .with_extension(estimate)
///     .send()
///     .await?;
/// let settle = Settle::of(answer.extensions());
/// let body = answer.bytes().await?;
/// // The body's `usage`, in each token dimension it gives (`paceline::http::usage`).
/// // Left as estimated if it gives none; or settle with a `Cost` of the user's own reading.
/// if let (Some(settle), Some(used)) = (settle, paceline::http::usage(&body)) {
///     settle.used(used);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Settle {
    gate: Arc<dyn Settles>,
    sent: Sent,
    scopes: Box<[Scope]>,
}

/// A gate, whatever its error type, as a [`Settle`] needs it.
pub(crate) trait Settles: Send + Sync {
    fn settle_ended(&self, ended: (&Sent, &[Scope]), actual: &Cost);
    fn gate_name(&self) -> &str;
    /// When the call whose future is being polled on this thread started, if one is, and
    /// where the fleet's store put that start.
    fn answering(&self) -> Option<Started>;
}

impl<E> Settles for Shared<E>
where
    Shared<E>: Send + Sync,
{
    fn settle_ended(&self, ended: (&Sent, &[Scope]), actual: &Cost) {
        Shared::settle_ended(self, ended, actual);
    }

    fn gate_name(&self) -> &str {
        &self.name
    }

    fn answering(&self) -> Option<Started> {
        Shared::answering(self)
    }
}

impl fmt::Debug for Settle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settle")
            .field("gate", &self.gate.gate_name())
            .field("sent", &self.sent.at)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Settle {
    /// What the call of `scopes` whose answer is being read on this thread drew of `gate`:
    /// `units` and `draws`.
    #[cfg_attr(
        not(any(feature = "reqwest-middleware", feature = "tower")),
        allow(dead_code)
    )]
    pub(crate) fn answered(
        gate: Arc<dyn Settles>,
        (units, draws): (u64, Draws),
        scopes: Box<[Scope]>,
    ) -> Self {
        let started = gate.answering();
        let sent = Sent {
            at: started.map(|(at, _)| at),
            rate: None.into(),
            cost: units,
            draws,
            // Where the fleet put the start: what the call cost less goes back there.
            fleet_at: started.and_then(|(_, fleet_at)| fleet_at),
        };
        Self { gate, sent, scopes }
    }

    /// What the request that an answer with these `extensions` answers drew of the gate, if
    /// a front-end put it there: the reqwest middleware does for a request that carried
    /// [`CallOptions`](crate::CallOptions) (`RequestBuilder::with_extension(options)`). Take
    /// it before reading the body, which consumes the answer.
    #[cfg(feature = "http")]
    pub fn of(extensions: &http::Extensions) -> Option<Settle> {
        extensions.get::<Settle>().cloned()
    }

    /// The request cost `actual`, in the dimensions it names (the others as estimated).
    pub fn used(self, actual: impl Into<Cost>) {
        self.gate
            .settle_ended((&self.sent, &self.scopes), &actual.into());
    }
}
