//! Size hints the combinators share: streams that batch their items, and streams that pass
//! every item on with at most one held back.

/// Size hint of a stream that passes on every item, one of them possibly held already.
pub(crate) fn held_size_hint(
    held: bool,
    upstream: (usize, Option<usize>),
) -> (usize, Option<usize>) {
    let held = usize::from(held);
    let (lower, upper) = upstream;
    (
        lower.saturating_add(held),
        upper.and_then(|upper| upper.checked_add(held)),
    )
}

/// Size hint of a stream of non-empty batches of at most `max_batch` items, `buffered` of them
/// already pulled from an upstream with hint `upstream`.
pub(crate) fn batch_size_hint(
    buffered: usize,
    upstream: (usize, Option<usize>),
    max_batch: usize,
) -> (usize, Option<usize>) {
    let (lower, upper) = upstream;
    let lower = lower.saturating_add(buffered).div_ceil(max_batch);
    let upper = upper.and_then(|upper| upper.checked_add(buffered));
    (lower, upper)
}
