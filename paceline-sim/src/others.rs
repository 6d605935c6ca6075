//! The arrival instants of other clients' requests, computed on demand.

use tokio::time::Instant;

use crate::rng::SplitMix64;

const NANOS_PER_MS: u128 = 1_000_000;

/// The arrivals of other clients at `rate_milli` thousandths of a request per second, from
/// `start` on (the first comes after `start`, never at it), each at a whole millisecond from
/// `start`.
///
/// Evenly spaced: request `k ≥ 1` is at `k / rate`, rounded down to the millisecond (so the
/// spacing never drifts). Random: the gaps are drawn uniformly from `[0, 2 / rate]` (mean
/// `1 / rate`) in nanoseconds, and each instant is rounded down to the millisecond.
#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    start: Instant,
    rate_milli: u64,
    /// `None` for even spacing.
    rng: Option<SplitMix64>,
    /// The number of the next request, for even spacing.
    k: u64,
    /// The exact offset of the next request, in nanoseconds from `start`.
    position: u128,
}

impl Arrivals {
    pub(crate) fn new(start: Instant, rate_milli: u64, rng: Option<SplitMix64>) -> Self {
        debug_assert!(rate_milli > 0);
        let mut arrivals = Self {
            start,
            rate_milli,
            rng,
            k: 0,
            position: 0,
        };
        arrivals.advance();
        arrivals
    }

    /// The arrival instant of the next request.
    pub(crate) fn peek(&self) -> Instant {
        let ms = self.position / NANOS_PER_MS;
        let nanos = u64::try_from(ms * NANOS_PER_MS).unwrap_or(u64::MAX);
        self.start + std::time::Duration::from_nanos(nanos)
    }

    /// Moves on to the request after the one [`peek`](Self::peek) shows.
    pub(crate) fn advance(&mut self) {
        // One request per `10^12 / rate_milli` nanoseconds.
        let per = 1_000_000_000_000u128;
        let rate = u128::from(self.rate_milli);
        match &mut self.rng {
            None => {
                self.k += 1;
                self.position = u128::from(self.k) * per / rate;
            }
            Some(rng) => {
                let max_gap = u64::try_from(2 * per / rate).unwrap_or(u64::MAX);
                self.position += u128::from(rng.up_to(max_gap));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets_ms(mut a: Arrivals, n: usize) -> Vec<u128> {
        let start = a.start;
        (0..n)
            .map(|_| {
                let at = a.peek();
                a.advance();
                (at - start).as_millis()
            })
            .collect()
    }

    #[test]
    fn even_spacing_rounds_down_without_drift() {
        let t0 = Instant::now();
        assert_eq!(
            offsets_ms(Arrivals::new(t0, 4_000, None), 4),
            [250, 500, 750, 1_000]
        );
        assert_eq!(
            offsets_ms(Arrivals::new(t0, 3_000, None), 4),
            [333, 666, 1_000, 1_333]
        );
    }

    #[test]
    fn random_spacing_keeps_the_mean_rate_and_repeats_per_seed() {
        let t0 = Instant::now();
        let a = Arrivals::new(t0, 10_000, Some(SplitMix64::new(3)));
        let b = Arrivals::new(t0, 10_000, Some(SplitMix64::new(3)));
        let offsets = offsets_ms(a, 1_000);
        assert_eq!(offsets, offsets_ms(b, 1_000));
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
        // 1000 requests at 10/s take about 100 s.
        let last = *offsets.last().unwrap();
        assert!((90_000..110_000).contains(&last), "{last}");
    }
}
