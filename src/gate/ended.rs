//! How a call ends, as its front-end receives it ([`Ended`], or [`Refused`] before its
//! first attempt), and what its value says it really cost ([`ActualCost`]).

use std::convert::Infallible;

use tokio::time::Instant;

use super::dimensions::Cost;
use super::options::Deadline;
use crate::error::{Error, Overloaded};

/// What a call's value says it really cost, for a call that settles its cost
/// ([`Gate::call_settled`](crate::Gate::call_settled)).
pub(crate) trait ActualCost<R>: Copy {
    fn actual(&self, value: &R) -> Option<Cost>;
}

/// Calls that cost what they were estimated at: nothing to read, and nothing left of it
/// once compiled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimated;

impl<R> ActualCost<R> for Estimated {
    #[inline(always)]
    fn actual(&self, _: &R) -> Option<Cost> {
        None
    }
}

/// A call's value read by the user's function of what it cost.
#[derive(Clone, Copy)]
pub(crate) struct ActualBy<F>(pub(crate) F);

impl<R, C: Into<Cost>, F: Fn(&R) -> C + Copy> ActualCost<R> for ActualBy<F> {
    fn actual(&self, value: &R) -> Option<Cost> {
        Some((self.0)(value).into())
    }
}

/// How a call ended, as its front-end receives it. A call that cannot have a deadline
/// (`D = Infallible`) cannot end [`Late`](Ended::Late).
#[derive(Debug)]
pub(crate) enum Ended<R, E, D> {
    /// Its value.
    Value(R),
    /// An error that is not a throttle.
    Failed(E),
    /// Throttled on every attempt the gate allows, the last with this error.
    GaveUp { attempts: u32, last: E },
    /// It could not start by its deadline: the earliest the gate could have started it, and
    /// the throttle of the attempt before, if this was a retry.
    Late {
        deadline: D,
        earliest: Instant,
        last: Option<E>,
    },
    /// The gate turned it away as it arrived, its line full: no attempt was made.
    Overloaded(Overloaded),
}

impl<R, E, D: Deadline> Ended<R, E, D> {
    /// The call's result, as [`Gate::call`](crate::Gate::call) gives it.
    pub(crate) fn into_result(self) -> Result<R, Error<E>> {
        match self {
            Ended::Value(value) => Ok(value),
            Ended::Failed(error) => Err(Error::Call(error)),
            Ended::GaveUp { attempts, last } => Err(Error::GaveUp { attempts, last }),
            Ended::Late {
                deadline,
                earliest,
                last,
            } => {
                debug_assert!(
                    earliest >= deadline.instant(),
                    "a call is late only past it"
                );
                Err(Error::Deadline {
                    earliest: Box::new(earliest),
                    last,
                })
            }
            Ended::Overloaded(overloaded) => Err(Error::Overloaded(overloaded)),
        }
    }
}

/// Why the gate refused a call as it arrived, before its first attempt's future was made.
#[derive(Debug)]
pub(crate) enum Refused<D> {
    /// The line was full.
    Overloaded(Overloaded),
    /// It cannot start by its deadline: the earliest it could.
    Late(D, Instant),
}

impl<D: Deadline> Refused<D> {
    /// The call's error, as [`Gate::call`](crate::Gate::call) gives it.
    pub(crate) fn into_error<E>(self) -> Error<E> {
        let Err(error) = Ended::<Infallible, E, D>::from(self).into_result();
        error
    }
}

impl<R, E, D> From<Refused<D>> for Ended<R, E, D> {
    fn from(refused: Refused<D>) -> Self {
        match refused {
            Refused::Overloaded(overloaded) => Ended::Overloaded(overloaded),
            Refused::Late(deadline, earliest) => Ended::Late {
                deadline,
                earliest,
                last: None,
            },
        }
    }
}
