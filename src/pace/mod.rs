//! The pure decisions behind the timer combinators.
//!
//! Each struct here takes instants and answers "go now" or "not before T"; none of them
//! touches a runtime, a clock or a timer, so they are tested on their own. The `Stream` types
//! wire them to one tokio timer each.

mod spacing;
mod vouchers;
mod window;

pub(crate) use spacing::Spacing;
pub(crate) use vouchers::{Admit, Vouchers};
pub(crate) use window::SlidingWindow;
