//! Weighted correlations: Pearson's r and Spearman's rank correlation, with a two-sided
//! p-value and the effective sample size of the weights.
//!
//! - Pearson: `r = Σw(x-x̄)(y-ȳ) / sqrt(Σw(x-x̄)² · Σw(y-ȳ)²)` with weighted means (two
//!   passes, so no cancellation from one-pass sums).
//! - Spearman: Pearson on weighted mid-ranks. An observation's rank is the weight of all
//!   smaller values plus half the weight of its ties. With equal weights this is the usual
//!   average rank, up to a shift, which Pearson ignores.
//! - Effective sample size (Kish): `n_eff = (Σw)² / Σw²`. That is n for equal weights, and
//!   less when a few intervals dominate. The p-value's t test uses `n_eff - 2` degrees of
//!   freedom, so unequal sampling is not taken for more evidence than it is.
//! - Sentinels as in cgmon: `-3` for fewer than two observations, `-2` when undefined (a
//!   constant series).

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Fewer than two observations (cgmon's CORR_INSUFFICIENT_SAMPLES).
pub const CORR_INSUFFICIENT: f64 = -3.0;
/// The coefficient is undefined, e.g. one series is constant (cgmon's CORR_UNDEFINED).
pub const CORR_UNDEFINED: f64 = -2.0;

/// cgmon's optional small-sample adjustments, with the formulas corrected (its B3, B4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Adjust {
    /// None.
    #[default]
    None,
    /// `-analyzer-adjusted-correlation-1`: Olkin–Pratt's approximation
    /// `r·(1 + (1-r²)/(2n))`, which cgmon computed as `r·(1 + (1-r²)/2·n)`; clamped to ±1.
    OlkinPratt,
    /// `-analyzer-adjusted-correlation-2`: `sign(r)·sqrt(max(0, 1 - (1-r²)(n-1)/(n-2)))`,
    /// which cgmon computed without the sign and let go NaN; `r` unchanged for n ≤ 2.
    Adjusted,
}

impl Adjust {
    fn apply(self, r: f64, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Adjust::None => r,
            Adjust::OlkinPratt => (r * (1.0 + (1.0 - r * r) / (2.0 * n))).clamp(-1.0, 1.0),
            Adjust::Adjusted if n <= 2.0 => r,
            Adjust::Adjusted => {
                let v = 1.0 - (1.0 - r * r) * (n - 1.0) / (n - 2.0);
                r.signum() * v.max(0.0).sqrt()
            }
        }
    }
}

/// One correlation between two series, with its evidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Correlation {
    /// Pearson's r in [-1, 1], or [`CORR_UNDEFINED`] / [`CORR_INSUFFICIENT`].
    pub pearson: f64,
    /// Spearman's ρ in [-1, 1], or a sentinel.
    pub spearman: f64,
    /// Two-sided p-value of `pearson` (before adjustment); `None` when undefined or when
    /// `n_eff ≤ 2`.
    pub pearson_p: Option<f64>,
    /// Two-sided p-value of `spearman`.
    pub spearman_p: Option<f64>,
    /// Pairs used.
    pub n: usize,
    /// Effective sample size of the weights.
    pub n_eff: f64,
}

/// Weighted Pearson's r; NaN when undefined. Exposed for tests and benches.
///
/// The sums are taken about each series' first value, not about zero. A constant series
/// then has a deviation of exactly zero, and r is undefined as it should be: about zero,
/// its weighted mean came out an ulp away from the value (a cwnd that never moved, over
/// uneven time weights), and r came out as rounding noise (such as -2e-16, p-value 1). The
/// shift also keeps large values with a small spread (cwnd in bytes) from losing precision.
pub fn pearson(x: &[f64], y: &[f64], w: Option<&[f64]>) -> f64 {
    let wt = |i: usize| w.map_or(1.0, |w| w[i]);
    let (x0, y0) = (x.first().copied().unwrap_or(0.0), y.first().copied().unwrap_or(0.0));
    let (mut sw, mut sx, mut sy) = (0.0, 0.0, 0.0);
    for i in 0..x.len() {
        let wi = wt(i);
        sw += wi;
        sx += wi * (x[i] - x0);
        sy += wi * (y[i] - y0);
    }
    let (mx, my) = (sx / sw, sy / sw);
    let (mut sxx, mut syy, mut sxy) = (0.0, 0.0, 0.0);
    for i in 0..x.len() {
        let (dx, dy, wi) = (x[i] - x0 - mx, y[i] - y0 - my, wt(i));
        sxx += wi * dx * dx;
        syy += wi * dy * dy;
        sxy += wi * dx * dy;
    }
    // Rounding can push |r| a hair past 1.
    (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0)
}

/// Weighted mid-ranks of `x` (see the module docs).
pub fn weighted_ranks(x: &[f64], w: Option<&[f64]>) -> Vec<f64> {
    let order = super::summary::sort_order(x, w);
    ranks_of_subset(x, &order, None, x.len(), w)
}

/// Weighted mid-ranks of `x`, or of a subset of it, from the order of all of `x`
/// ([`sort_order`]). With `slot`, `slot[i]` is the subset position of element `i` or
/// `u32::MAX` to leave it out, and `w` holds the subset's weights; without it the subset is
/// all of `x`. Lets one sort serve several subsets.
///
/// [`sort_order`]: super::summary::sort_order
pub fn ranks_of_subset(
    x: &[f64],
    order: &[u32],
    slot: Option<&[u32]>,
    subset_len: usize,
    w: Option<&[f64]>,
) -> Vec<f64> {
    let wt = |j: usize| w.map_or(1.0, |w| w[j]);
    let pos = |i: u32| slot.map_or(i, |s| s[i as usize]) as usize;
    let filtered: Vec<u32>;
    let members: &[u32] = match slot {
        None => order,
        Some(slot) => {
            filtered = order.iter().copied().filter(|&i| slot[i as usize] != u32::MAX).collect();
            &filtered
        }
    };
    let mut ranks = vec![0.0; subset_len];
    let mut below = 0.0;
    let mut k = 0;
    while k < members.len() {
        let v = x[members[k] as usize];
        let mut end = k;
        let mut tie_w = 0.0;
        while end < members.len() && x[members[end] as usize] == v {
            tie_w += wt(pos(members[end]));
            end += 1;
        }
        for &i in &members[k..end] {
            ranks[pos(i)] = below + tie_w / 2.0;
        }
        below += tie_w;
        k = end;
    }
    ranks
}

/// Kish's effective sample size.
pub fn effective_n(n: usize, w: Option<&[f64]>) -> f64 {
    match w {
        None => n as f64,
        Some(w) => {
            let (s, s2) = w.iter().fold((0.0, 0.0), |(s, s2), v| (s + v, s2 + v * v));
            if s2 > 0.0 { s * s / s2 } else { 0.0 }
        }
    }
}

/// Two-sided p-value of a correlation `r` under H0: ρ = 0, t test with `n_eff - 2` degrees
/// of freedom. `None` when it cannot be computed.
pub fn p_value(r: f64, n_eff: f64) -> Option<f64> {
    let df = n_eff - 2.0;
    if !r.is_finite() || df.is_nan() || df <= 0.0 {
        return None;
    }
    if r.abs() >= 1.0 {
        return Some(0.0);
    }
    let t = r * (df / (1.0 - r * r)).sqrt();
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = 2.0 * (1.0 - dist.cdf(t.abs()));
    p.is_finite().then_some(p.clamp(0.0, 1.0))
}

/// Correlates `x` with `y` (same length), weighted by `w` when given, and applies `adjust` to
/// both coefficients. Never returns NaN or infinity.
pub fn correlate(x: &[f64], y: &[f64], w: Option<&[f64]>, adjust: Adjust) -> Correlation {
    if x.len() < 2 {
        return correlate_ranked(x, y, &[], &[], w, adjust);
    }
    correlate_ranked(x, y, &weighted_ranks(x, w), &weighted_ranks(y, w), w, adjust)
}

/// [`correlate`] with the weighted ranks of `x` and `y` already computed.
pub fn correlate_ranked(
    x: &[f64],
    y: &[f64],
    rx: &[f64],
    ry: &[f64],
    w: Option<&[f64]>,
    adjust: Adjust,
) -> Correlation {
    let n = x.len();
    debug_assert_eq!(n, y.len());
    let n_eff = effective_n(n, w);
    if n < 2 {
        return Correlation {
            pearson: CORR_INSUFFICIENT,
            spearman: CORR_INSUFFICIENT,
            pearson_p: None,
            spearman_p: None,
            n,
            n_eff,
        };
    }
    let r = pearson(x, y, w);
    let rho = pearson(rx, ry, w);
    let finish = |v: f64| if v.is_finite() { adjust.apply(v, n) } else { CORR_UNDEFINED };
    Correlation {
        pearson: finish(r),
        spearman: finish(rho),
        pearson_p: p_value(r, n_eff),
        spearman_p: p_value(rho, n_eff),
        n,
        n_eff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Reference vectors from tests/reference/stats_vectors.py (numpy.cov with aweights,
    // scipy.stats.pearsonr/spearmanr, scipy.stats.t), pasted from its output.
    const X: [f64; 10] = [10.0, 12.0, 9.0, 15.0, 14.0, 11.0, 18.0, 16.0, 13.0, 17.0];
    const Y: [f64; 10] = [2.0, 2.5, 1.0, 4.0, 3.0, 2.5, 5.5, 4.0, 3.5, 4.5];
    const W: [f64; 10] = [1.0, 0.5, 2.0, 1.0, 3.0, 1.0, 0.5, 1.5, 1.0, 2.0];

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn unweighted_matches_scipy() {
        let c = correlate(&X, &Y, None, Adjust::None);
        assert!(close(c.pearson, 0.9678717671136797, 1e-12), "{c:?}");
        assert!(close(c.pearson_p.unwrap(), 4.4841730695156896e-06, 1e-6), "{c:?}");
        assert!(close(c.spearman, 0.9817255676437577, 1e-12), "{c:?}");
        assert!(close(c.spearman_p.unwrap(), 4.773070226572782e-07, 1e-6), "{c:?}");
        assert_eq!(c.n_eff, 10.0);
    }

    #[test]
    fn weighted_matches_numpy() {
        let c = correlate(&X, &Y, Some(&W), Adjust::None);
        assert!(close(c.pearson, 0.9656067268334637, 1e-12), "{c:?}");
        assert!(close(c.pearson_p.unwrap(), 0.00015774076336556395, 1e-6), "{c:?}");
        assert!(close(c.spearman, 0.9672322803604407, 1e-12), "{c:?}");
        assert!(close(c.spearman_p.unwrap(), 0.00013765052615553395, 1e-6), "{c:?}");
        assert!(close(c.n_eff, 7.673684210526316, 1e-12), "{c:?}");
    }

    #[test]
    fn issue_3_rtt_falling_while_cwnd_rises_is_minus_one() {
        // cgmon's B1 correlated sorted RTTs with time-ordered cwnd and reported +1 here.
        let rtt: Vec<f64> = (0..50).map(|i| 100.0 - i as f64).collect();
        let cwnd: Vec<f64> = (0..50).map(|i| 10_000.0 + 1448.0 * i as f64).collect();
        let c = correlate(&rtt, &cwnd, None, Adjust::None);
        assert!(close(c.pearson, -1.0, 1e-12), "{c:?}");
        assert!(close(c.spearman, -1.0, 1e-12), "{c:?}");
    }

    #[test]
    fn sentinels() {
        assert_eq!(correlate(&[1.0], &[2.0], None, Adjust::None).pearson, CORR_INSUFFICIENT);
        let c = correlate(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0], None, Adjust::None);
        assert_eq!((c.pearson, c.spearman, c.pearson_p), (CORR_UNDEFINED, CORR_UNDEFINED, None));
    }

    #[test]
    fn a_constant_series_is_undefined_under_uneven_weights() {
        // A cwnd that never moved, weighted by the time each sample held. About zero, the
        // weighted mean of 0.1 (or of the ranks, all W's sum / 2) came out an ulp off, and
        // both coefficients came out as rounding noise with a p-value of 1.
        for v in [0.1, 1.7, 14_480.0, 1e6 / 7.0] {
            let c = correlate(&[v; 10], &Y, Some(&W), Adjust::None);
            assert_eq!(c.pearson, CORR_UNDEFINED, "{v}: {c:?}");
            assert_eq!(c.spearman, CORR_UNDEFINED, "{v}: {c:?}");
            assert_eq!((c.pearson_p, c.spearman_p), (None, None), "{v}: {c:?}");
            let c = correlate(&X, &[v; 10], Some(&W), Adjust::None);
            assert_eq!((c.pearson, c.spearman), (CORR_UNDEFINED, CORR_UNDEFINED), "{v}: {c:?}");
        }
    }

    #[test]
    fn adjustments_keep_sign_and_stay_finite() {
        for r in [-0.99, -0.5, -0.1, 0.0, 0.05, 0.3, 0.9, 1.0] {
            for n in [2usize, 3, 5, 100] {
                for a in [Adjust::OlkinPratt, Adjust::Adjusted] {
                    let v = a.apply(r, n);
                    assert!(v.is_finite() && (-1.0..=1.0).contains(&v), "{a:?} r={r} n={n}: {v}");
                    assert!(
                        v == 0.0 || v.signum() == r.signum() || r == 0.0,
                        "{a:?} r={r} n={n}: {v}"
                    );
                }
            }
        }
        // cgmon's B3 gave |r| > 1 here; B4 gave NaN (r² < 1/(n-1)).
        assert!(close(Adjust::OlkinPratt.apply(0.5, 10), 0.5 * (1.0 + 0.75 / 20.0), 1e-12));
        assert_eq!(Adjust::Adjusted.apply(0.1, 10), 0.0);
        assert!(close(
            Adjust::Adjusted.apply(-0.9, 10),
            -(1.0f64 - 0.19 * 9.0 / 8.0).sqrt(),
            1e-12
        ));
    }

    proptest! {
        #[test]
        fn correlations_stay_in_range_and_ignore_weight_scale(
            data in prop::collection::vec((-1e3f64..1e3, -1e3f64..1e3, 0.01f64..10.0), 0..40),
            scale in 0.01f64..100.0,
        ) {
            let x: Vec<f64> = data.iter().map(|d| d.0).collect();
            let y: Vec<f64> = data.iter().map(|d| d.1).collect();
            let w: Vec<f64> = data.iter().map(|d| d.2).collect();
            let c = correlate(&x, &y, Some(&w), Adjust::None);
            for v in [c.pearson, c.spearman] {
                prop_assert!(v == CORR_INSUFFICIENT || v == CORR_UNDEFINED || (-1.0..=1.0).contains(&v));
            }
            for p in [c.pearson_p, c.spearman_p].into_iter().flatten() {
                prop_assert!((0.0..=1.0).contains(&p));
            }
            let ws: Vec<f64> = w.iter().map(|v| v * scale).collect();
            let d = correlate(&x, &y, Some(&ws), Adjust::None);
            prop_assert!((c.pearson - d.pearson).abs() < 1e-9, "{:?} {:?}", c, d);
            prop_assert!((c.spearman - d.spearman).abs() < 1e-9, "{:?} {:?}", c, d);
            prop_assert!((c.n_eff - d.n_eff).abs() < 1e-9 * c.n_eff.max(1.0));
        }

        #[test]
        fn a_constant_series_is_undefined_under_any_weights(
            data in prop::collection::vec((-1e3f64..1e3, 0.0f64..10.0), 2..40),
            level in -1e9f64..1e9,
        ) {
            let x = vec![level; data.len()];
            let y: Vec<f64> = data.iter().map(|d| d.0).collect();
            let w: Vec<f64> = data.iter().map(|d| d.1).collect();
            for (a, b) in [(&x, &y), (&y, &x)] {
                let c = correlate(a, b, Some(&w), Adjust::None);
                prop_assert_eq!((c.pearson, c.spearman), (CORR_UNDEFINED, CORR_UNDEFINED), "{:?}", c);
                prop_assert_eq!((c.pearson_p, c.spearman_p), (None, None));
            }
        }
    }
}
