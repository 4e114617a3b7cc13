//! Medians, spread, and the percentile bootstrap of a ratio of medians: resample each group
//! with replacement, take the ratio of the resamples' medians, 10,000 times from a fixed seed,
//! and keep the 2.5th and 97.5th percentiles. An interval that excludes 1 is a real difference.

/// Resamples for [`ratio_interval`].
pub const RESAMPLES: usize = 10_000;
/// The fixed seed, so the same figures always give the same interval.
pub const SEED: u64 = 0x5a9_9011c;

/// The median (mean of the middle two for an even count); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Smallest and largest.
pub fn range(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs.iter().copied().min_by(f64::total_cmp)?;
    let hi = xs.iter().copied().max_by(f64::total_cmp)?;
    Some((lo, hi))
}

/// The ratio of medians `b / a` and its 95% percentile bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// Whether the interval excludes 1.
    pub fn is_real(&self) -> bool {
        self.high < 1.0 || self.low > 1.0
    }
}

/// `median(b) / median(a)` with its interval; `None` when a group is empty or `a`'s median is 0.
pub fn ratio_interval(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    let ratio = median(b)? / nonzero(median(a)?)?;
    let mut rng = SplitMix(seed);
    let mut ratios = Vec::with_capacity(resamples);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    for _ in 0..resamples {
        for x in ra.iter_mut() {
            *x = a[rng.below(a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.below(b.len())];
        }
        if let Some(ma) = median(&ra).and_then(nonzero) {
            ratios.push(median(&rb)? / ma);
        }
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    (!ratios.is_empty()).then(|| Interval { ratio, low: at(0.025), high: at(0.975) })
}

fn nonzero(x: f64) -> Option<f64> {
    (x != 0.0).then_some(x)
}

/// SplitMix64: small, fast, and the same sequence everywhere (the bootstrap's resamples, and the
/// seeded cases of `tests/differential.rs`).
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(range(&[2.0, 5.0, 1.0]), Some((1.0, 5.0)));
    }

    #[test]
    fn separated_groups_give_an_interval_below_one() {
        // The prototype's instruction-count figures (KASAN outline, guest wall, 5 boots each).
        let a = [7.62, 7.54, 7.69, 7.60, 7.65];
        let b = [5.36, 5.31, 5.47, 5.33, 5.40];
        let i = ratio_interval(&a, &b, RESAMPLES, SEED).unwrap();
        assert!((i.ratio - 5.36 / 7.62).abs() < 1e-12, "{i:?}");
        assert!(i.low <= i.ratio && i.ratio <= i.high && i.high < 1.0 && i.is_real(), "{i:?}");
        // The same seed gives the same interval.
        assert_eq!(ratio_interval(&a, &b, RESAMPLES, SEED), Some(i));
    }

    #[test]
    fn overlapping_groups_are_no_measurable_difference() {
        let a = [10.0, 12.0, 9.0, 11.0, 10.5, 9.5];
        let b = [10.2, 9.1, 11.8, 10.1, 9.8, 11.0];
        let i = ratio_interval(&a, &b, RESAMPLES, SEED).unwrap();
        assert!(i.low < 1.0 && i.high > 1.0 && !i.is_real(), "{i:?}");
        assert_eq!(ratio_interval(&[], &b, RESAMPLES, SEED), None);
    }
}
