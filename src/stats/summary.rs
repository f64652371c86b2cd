//! Seven-number summaries: the 2nd, 9th, 25th, 50th, 75th, 91st and 98th percentiles.
//!
//! The quantile definitions are cgmon's (gonum's `stat.Quantile`, docs/cgmon.md, "Quantiles"), so
//! the numbers match cgmon's for the same data. With the observations sorted by value and
//! `W` the total weight, let `f = p·W` and walk the cumulative weight `c` until `c ≥ f` at
//! index `i`:
//! - `Empirical` returns `x[i]`;
//! - `LinInterp` returns `x[0]` when `i = 0`, else `t·x[i-1] + (1-t)·x[i]` with
//!   `t = (c - f) / w[i]`.
//!
//! Unlike cgmon, the result does not depend on the input order of tied values (its B5):
//! the lightest of a run of ties goes first, the one position where a weight can matter.
//! Without weights this is exactly cgmon's result.

/// The percentiles of a seven-number summary, as fractions.
pub const PERCENTILES: [f64; 7] = [0.02, 0.09, 0.25, 0.5, 0.75, 0.91, 0.98];

/// Which quantile definition to use (cgmon's `-analyzer-cumulant-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantileKind {
    /// Linear interpolation between neighbours (cgmon's default, `lininterp`).
    #[default]
    LinInterp,
    /// The first value whose cumulative weight reaches the quantile (`empirical`).
    Empirical,
}

impl QuantileKind {
    /// Parses cgmon's names, `lininterp` and `empirical`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "lininterp" => Some(Self::LinInterp),
            "empirical" => Some(Self::Empirical),
            _ => None,
        }
    }
}

/// Indices of `x` sorted by value; within each run of equal values the lightest comes
/// first. That makes the order of equal values in the input irrelevant to any result
/// (cgmon's unstable sort was not: its B5).
///
/// Sorting is most of an analysis's cost, so this uses radsort's radix sort: linear time,
/// several times faster than a comparison sort at thousands of samples.
pub fn sort_order(x: &[f64], w: Option<&[f64]>) -> Vec<u32> {
    // A series of floats that is mostly zero (retransmits per second: most intervals have
    // none) sorts its non-zero values alone, with the zeros' run spliced in where zero
    // falls: a radix sort of f64 keys takes up to 8 passes over every element.
    // (+0.0 only: radsort, like f64::total_cmp, puts -0.0 before it.)
    let zero = |i: u32| x[i as usize].to_bits() == 0;
    let zeros = (0..x.len() as u32).filter(|&i| zero(i)).count();
    if zeros < x.len() / 2 {
        return sort_order_by(x, w);
    }
    let mut rest: Vec<u32> = (0..x.len() as u32).filter(|&i| !zero(i)).collect();
    radsort::sort_by_key(&mut rest, |&i| x[i as usize]);
    let split = rest.partition_point(|&i| x[i as usize].is_sign_negative());
    let mut order = Vec::with_capacity(x.len());
    order.extend_from_slice(&rest[..split]);
    order.extend((0..x.len() as u32).filter(|&i| zero(i)));
    order.extend_from_slice(&rest[split..]);
    if let Some(w) = w {
        lightest_first_in_ties(&mut order, x, w);
    }
    order
}

/// [`sort_order`] by keys that order like the values (e.g. the integer counters a series
/// of floats was computed from by a strictly increasing map): narrower keys need fewer
/// radix passes.
pub fn sort_order_by<K: radsort::Key + PartialEq + Copy>(
    keys: &[K],
    w: Option<&[f64]>,
) -> Vec<u32> {
    // Sorting the 4-byte indices (keys fetched through them) keeps the buffers radsort
    // needs small: a 10,000-sample flow's stay below the allocator's mmap threshold.
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    radsort::sort_by_key(&mut order, |&i| keys[i as usize]);
    if let Some(w) = w {
        lightest_first_in_ties(&mut order, keys, w);
    }
    order
}

/// Within each run of equal values in `order`, moves the lightest element first. Only the
/// first element's weight in a run can change a result (LinInterp interpolates from the
/// previous distinct value using it; later ties interpolate between equal values), so this
/// gives the same result for any input order, without sorting the run.
fn lightest_first_in_ties<K: PartialEq + Copy>(order: &mut [u32], keys: &[K], w: &[f64]) {
    let mut start = 0;
    while start < order.len() {
        let v = keys[order[start] as usize];
        let mut end = start + 1;
        let mut lightest = start;
        while end < order.len() && keys[order[end] as usize] == v {
            if w[order[end] as usize] < w[order[lightest] as usize] {
                lightest = end;
            }
            end += 1;
        }
        order.swap(start, lightest);
        start = end;
    }
}

/// [`sort_order_by`] for u64 counters, with 4-byte keys when the values allow (half the
/// radix passes).
pub fn sort_order_u64(keys: &[u64], w: Option<&[f64]>) -> Vec<u32> {
    if keys.iter().all(|&k| k <= u64::from(u32::MAX)) {
        let narrow: Vec<u32> = keys.iter().map(|&k| k as u32).collect();
        sort_order_by(&narrow, w)
    } else {
        sort_order_by(keys, w)
    }
}

/// The seven-number summary of `x`, weighted by `w` when given. `None` for no data.
///
/// Non-finite values must not be passed (the analyzer never produces them). A zero total
/// weight (a single observation with weight 0) falls back to equal weights.
pub fn seven_number(x: &[f64], w: Option<&[f64]>, kind: QuantileKind) -> Option<[f64; 7]> {
    seven_number_sorted(x, w, &sort_order(x, w), kind)
}

/// [`seven_number`] with the order already computed by [`sort_order`] (the analyzer sorts
/// each series once and uses the order for its ranks too).
pub fn seven_number_sorted(
    x: &[f64],
    w: Option<&[f64]>,
    order: &[u32],
    kind: QuantileKind,
) -> Option<[f64; 7]> {
    if x.is_empty() {
        return None;
    }
    debug_assert!(w.is_none_or(|w| w.len() == x.len()) && order.len() == x.len());
    let total: f64 = w.map_or(0.0, |w| order.iter().map(|&i| w[i as usize]).sum());
    match w {
        Some(w) if total > 0.0 => Some(walk(x, order, |i| w[i], total, kind)),
        _ => Some(walk(x, order, |_| 1.0, x.len() as f64, kind)),
    }
}

/// The cumulative-weight walk of [`seven_number_sorted`], monomorphised per weighting.
#[inline]
fn walk(
    x: &[f64],
    order: &[u32],
    weight: impl Fn(usize) -> f64,
    total: f64,
    kind: QuantileKind,
) -> [f64; 7] {
    let mut out = [0.0; 7];
    let mut k = 0; // position in `order`
    let mut prev = x[order[0] as usize];
    let mut cum = weight(order[0] as usize);
    for (slot, p) in out.iter_mut().zip(PERCENTILES) {
        let f = p * total;
        // Advance to the first position whose cumulative weight reaches f.
        while cum < f && k + 1 < order.len() {
            prev = x[order[k] as usize];
            k += 1;
            cum += weight(order[k] as usize);
        }
        let i = order[k] as usize;
        *slot = match kind {
            QuantileKind::Empirical => x[i],
            QuantileKind::LinInterp if k == 0 => x[i],
            QuantileKind::LinInterp => {
                let t = ((cum - f) / weight(i)).clamp(0.0, 1.0);
                t * prev + (1.0 - t) * x[i]
            }
        };
    }
    out
}

/// The nearest-rank `p`-th percentile of sorted `v`.
pub fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 98.0), Some(98.0));
        assert_eq!(percentile(&[3.0], 98.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
    use proptest::prelude::*;

    // Reference vectors: tests/reference/stats_vectors.py, an independent Python
    // implementation of the definition above, and its output pasted here.

    #[test]
    fn cgmon_documented_examples() {
        // docs/cgmon.md, "Quantiles": x = 1..5 unweighted.
        let s = seven_number(&[1.0, 2.0, 3.0, 4.0, 5.0], None, QuantileKind::LinInterp).unwrap();
        assert_eq!(s, [1.0, 1.0, 1.25, 2.5, 3.75, 4.55, 4.9]);
        // "the unweighted median of {0.5, 0.6, 0.7} is 0.55"
        let s = seven_number(&[0.7, 0.5, 0.6], None, QuantileKind::LinInterp).unwrap();
        assert!((s[3] - 0.55).abs() < 1e-12);
    }

    #[test]
    fn reference_vectors() {
        let x = [12.0, 3.5, 7.25, 3.5, 20.0, 9.0, 15.5, 1.0];
        let w = [1.0, 2.0, 0.5, 1.5, 3.0, 1.0, 0.25, 2.75];
        type Case<'a> = (Option<&'a [f64]>, QuantileKind, [f64; 7]);
        let cases: [Case; 4] = [
            (None, QuantileKind::LinInterp, [1.0, 1.0, 3.5, 7.25, 12.0, 16.76, 19.28]),
            (None, QuantileKind::Empirical, [1.0, 1.0, 3.5, 7.25, 12.0, 20.0, 20.0]),
            (
                Some(&w),
                QuantileKind::LinInterp,
                [1.0, 1.0, 1.416666666667, 3.5, 15.5, 18.38, 19.64],
            ),
            (Some(&w), QuantileKind::Empirical, [1.0, 1.0, 3.5, 3.5, 15.5, 20.0, 20.0]),
        ];
        for (w, kind, want) in cases {
            let got = seven_number(&x, w, kind).unwrap();
            for (g, e) in got.iter().zip(want) {
                assert!(
                    (g - e).abs() < 1e-9,
                    "{kind:?} weighted={} got {got:?} want {want:?}",
                    w.is_some()
                );
            }
        }
    }

    #[test]
    fn issue_3_ties_give_the_same_result_in_any_order() {
        // cgmon's seed-7 style case: tied values with irregular weights.
        let x = [1.0, 2.0, 2.0, 3.0, 1.0, 3.0, 3.0];
        let w = [0.5, 1.0, 3.0, 0.25, 2.0, 1.0, 0.75];
        let a = seven_number(&x, Some(&w), QuantileKind::LinInterp).unwrap();
        let mut idx: Vec<usize> = (0..x.len()).collect();
        idx.reverse();
        let xr: Vec<f64> = idx.iter().map(|&i| x[i]).collect();
        let wr: Vec<f64> = idx.iter().map(|&i| w[i]).collect();
        let b = seven_number(&xr, Some(&wr), QuantileKind::LinInterp).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, [1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]); // stats_vectors.py
        // And for every rotation of the input.
        for k in 1..x.len() {
            let xr: Vec<f64> = (0..x.len()).map(|i| x[(i + k) % x.len()]).collect();
            let wr: Vec<f64> = (0..x.len()).map(|i| w[(i + k) % x.len()]).collect();
            assert_eq!(seven_number(&xr, Some(&wr), QuantileKind::LinInterp).unwrap(), a);
        }
    }

    #[test]
    fn single_value_and_zero_weight() {
        assert_eq!(seven_number(&[4.0], Some(&[0.0]), QuantileKind::LinInterp), Some([4.0; 7]));
        assert_eq!(seven_number(&[], None, QuantileKind::LinInterp), None);
    }

    proptest! {
        /// Both paths of `sort_order` (mostly zeros, or not) give a stable sort by value
        /// (-0.0 before 0.0, as radsort orders them), with the lightest of each run of
        /// ties moved first.
        #[test]
        fn sort_order_is_a_stable_sort_by_value(
            data in prop::collection::vec(
                (prop_oneof![3 => Just(0.0f64), 1 => Just(-0.0f64), 2 => (-5i32..5).prop_map(f64::from)], 1u8..4),
                0..80,
            ),
        ) {
            let x: Vec<f64> = data.iter().map(|d| d.0).collect();
            let w: Vec<f64> = data.iter().map(|d| f64::from(d.1)).collect();
            let mut want: Vec<u32> = (0..x.len() as u32).collect();
            want.sort_by(|&a, &b| x[a as usize].total_cmp(&x[b as usize]));
            prop_assert_eq!(sort_order(&x, None), want.clone());
            lightest_first_in_ties(&mut want, &x, &w);
            prop_assert_eq!(sort_order(&x, Some(&w)), want);
        }

        #[test]
        fn summaries_never_decrease_and_ignore_weight_scale(
            data in prop::collection::vec((-1e6f64..1e6, 0.001f64..100.0), 1..60),
            scale in 0.001f64..1000.0,
            empirical in any::<bool>(),
        ) {
            let kind = if empirical { QuantileKind::Empirical } else { QuantileKind::LinInterp };
            let x: Vec<f64> = data.iter().map(|d| d.0).collect();
            let w: Vec<f64> = data.iter().map(|d| d.1).collect();
            let s = seven_number(&x, Some(&w), kind).unwrap();
            for pair in s.windows(2) {
                prop_assert!(pair[0] <= pair[1] + 1e-9 * pair[1].abs().max(1.0), "{:?}", s);
            }
            let lo = x.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(s[0] >= lo - 1e-9 && s[6] <= hi + 1e-9);
            let ws: Vec<f64> = w.iter().map(|v| v * scale).collect();
            let t = seven_number(&x, Some(&ws), kind).unwrap();
            for (a, b) in s.iter().zip(t) {
                prop_assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{:?} vs {:?}", s, t);
            }
        }
    }
}
