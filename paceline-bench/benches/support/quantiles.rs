//! Median and quartiles of a bench's passes, the figures every summary reports.

pub(crate) struct Quantiles {
    pub(crate) median: f64,
    pub(crate) p25: f64,
    pub(crate) p75: f64,
}

/// Sorts `values` in place and reads the quartiles off them (nearest rank).
pub(crate) fn quantiles(values: &mut [f64]) -> Quantiles {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Quantiles {
        median: at(0.5),
        p25: at(0.25),
        p75: at(0.75),
    }
}
