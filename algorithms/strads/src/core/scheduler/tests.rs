use super::*;
use petrel_ml::data::SparseColumns;
use proptest::prelude::*;
use std::sync::Arc;

/// A scheduler of `n_vars` coordinates drawing rounds of `block` from pools of `pool`
/// candidates (`mode`, `seed`), dropping candidates that `oracle` correlates above `rho`.
fn filtered(
    n_vars: usize,
    (mode, block, pool, seed): (ScheduleMode, usize, usize, u64),
    rho: f32,
    oracle: impl CorrelationOracle + Send + 'static,
) -> LassoScheduler {
    let mut config = SchedulerConfig::new(mode, block);
    config.candidate_pool = pool;
    config.seed = seed;
    let filter = DependencyFilter {
        rho,
        oracle: Box::new(oracle),
    };
    LassoScheduler::new(n_vars, config, Some(filter)).unwrap()
}

/// A cyclic scheduler over the columns of `x`, rounds of all of them, filtered at 0.5.
fn cyclic_over_columns_of(x: &ndarray::Array2<f32>) -> LassoScheduler {
    let oracle = ColumnCorrelationCache::new(Arc::new(SparseColumns::from_dense(x)), 100);
    let n = x.ncols();
    filtered(n, (ScheduleMode::Cyclic, n, n, 0), 0.5, oracle)
}

#[test]
fn sum_tree_samples_proportionally() {
    let tree = SumTree::new(&[1.0, 0.0, 3.0]);
    assert_eq!(tree.total(), 4.0);
    assert_eq!(tree.find(0.5), 0);
    assert_eq!(tree.find(1.0), 2);
    assert_eq!(tree.find(3.999), 2);
    assert_eq!(tree.find(4.0), 2);
}

#[test]
fn cyclic_walks_in_order() {
    let mut s =
        LassoScheduler::new(5, SchedulerConfig::new(ScheduleMode::Cyclic, 2), None).unwrap();
    assert_eq!(s.next_round(), vec![0, 1]);
    assert_eq!(s.next_round(), vec![2, 3]);
    assert_eq!(s.next_round(), vec![4, 0]);
}

#[test]
fn random_draws_distinct() {
    let mut s =
        LassoScheduler::new(10, SchedulerConfig::new(ScheduleMode::Random, 4), None).unwrap();
    for _ in 0..20 {
        let mut round = s.next_round();
        assert_eq!(round.len(), 4);
        round.sort();
        round.dedup();
        assert_eq!(round.len(), 4);
    }
}

#[test]
fn dynamic_prefers_moving_coordinates() {
    let mut s =
        LassoScheduler::new(100, SchedulerConfig::new(ScheduleMode::Dynamic, 1), None).unwrap();
    let settled: Vec<(usize, f32)> = (0..100).map(|j| (j, 0.0)).collect();
    s.commit(&settled);
    s.commit(&[(42, 1.0)]);
    let hits = (0..200).filter(|_| s.next_round() == vec![42]).count();
    assert!(hits > 190, "{hits}");
}

#[test]
fn dynamic_draws_without_replacement() {
    let mut s =
        LassoScheduler::new(6, SchedulerConfig::new(ScheduleMode::Dynamic, 6), None).unwrap();
    let mut round = s.next_round();
    round.sort();
    assert_eq!(round, vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn filter_drops_correlated_candidates() {
    let x = ndarray::array![[1.0f32, 1.0, 0.0], [0.0, 0.1, 1.0]];
    let mut s = cyclic_over_columns_of(&x);
    assert_eq!(s.next_round(), vec![0, 2]);
}

#[test]
fn cyclic_with_filter_reaches_every_coordinate() {
    // Neighbours j, j+1 are strongly correlated: a plain cyclic window would drop the
    // same coordinates every sweep.
    let corr = |j: usize, k: usize| if j.abs_diff(k) < 4 { 0.9f32 } else { 0.0 };
    let mut s = filtered(40, (ScheduleMode::Cyclic, 4, 16, 0), 0.5, corr);
    let mut seen = vec![false; 40];
    for _ in 0..40 {
        for j in s.next_round() {
            seen[j] = true;
        }
    }
    assert!(seen.iter().all(|&v| v), "{seen:?}");
}

#[test]
fn chacha12_is_the_std_rng_stream() {
    use rand::RngCore;
    let mut a = rand::rngs::StdRng::seed_from_u64(77);
    let mut b = ChaCha12Rng::seed_from_u64(77);
    for _ in 0..100 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
}

#[test]
fn exported_state_continues_bit_identically() {
    for mode in [
        ScheduleMode::Dynamic,
        ScheduleMode::Random,
        ScheduleMode::Cyclic,
    ] {
        let corr = |j: usize, k: usize| if j.abs_diff(k) < 3 { 0.9f32 } else { 0.0 };
        let make = || filtered(57, (mode, 5, 12, 9), 0.5, corr);
        let mut a = make();
        // Odd number of draws so the RNG is mid-block.
        for r in 0..7 {
            let chosen = a.next_round();
            let changes: Vec<(usize, f32)> =
                chosen.iter().map(|&j| (j, 0.01 * (r + j) as f32)).collect();
            a.commit(&changes);
        }
        let state = a.export_state();
        let mut b = make();
        b.import_state(&state).unwrap();
        assert_eq!(b.export_state(), state);
        for r in 0..30 {
            let (x, y) = (a.next_round(), b.next_round());
            assert_eq!(x, y, "{mode:?} round {r}");
            let changes: Vec<(usize, f32)> =
                x.iter().map(|&j| (j, 0.3 / (1 + r + j) as f32)).collect();
            a.commit(&changes);
            b.commit(&changes);
        }
        let mut wrong = state.clone();
        wrong.priorities.pop();
        assert!(b.import_state(&wrong).is_err());
    }
}

proptest! {
    #[test]
    fn filter_never_keeps_a_correlated_pair(
        n_vars in 2usize..30,
        block in 1usize..8,
        pool in 1usize..30,
        rho in 0.05f32..0.95,
        seed in any::<u64>(),
        mode in prop_oneof![Just(ScheduleMode::Dynamic), Just(ScheduleMode::Random), Just(ScheduleMode::Cyclic)],
        corr_seed in any::<u64>(),
    ) {
        // A symmetric pseudo-random correlation "matrix" from a hash of the pair.
        let corr = move |j: usize, k: usize| -> f32 {
            let (a, b) = (j.min(k) as u64, j.max(k) as u64);
            let h = (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) ^ corr_seed)
                .wrapping_mul(0x1656_67B1_9E37_79F9);
            (h >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut s = filtered(n_vars, (mode, block, pool, seed), rho, corr);
        for round in 0..5 {
            let chosen = s.next_round();
            prop_assert!(chosen.len() <= block);
            for (a, &j) in chosen.iter().enumerate() {
                for &k in &chosen[a + 1..] {
                    prop_assert!(j != k);
                    prop_assert!(corr(j, k) < rho, "pair ({}, {}) corr {}", j, k, corr(j, k));
                }
            }
            let changes: Vec<(usize, f32)> = chosen.iter().map(|&j| (j, round as f32 * 0.1)).collect();
            s.commit(&changes);
        }
    }
}

/// Only the pairwise questions: the trait's default `keep_independent`.
struct PairwiseOnly(ColumnCorrelationCache);

impl CorrelationOracle for PairwiseOnly {
    fn abs_correlation(&mut self, j: usize, k: usize) -> f32 {
        self.0.abs_correlation(j, k)
    }
}

/// The cache under test and its pairwise-only twin, over one random 30 x 40 design.
fn fast_and_pairwise(density: f64, seed: u64) -> (ColumnCorrelationCache, PairwiseOnly) {
    let x = Arc::new(random_sparse(30, 40, density, seed));
    let fast = ColumnCorrelationCache::new(x.clone(), 1000);
    (fast, PairwiseOnly(ColumnCorrelationCache::new(x, 1000)))
}

fn random_sparse(rows: usize, cols: usize, density: f64, seed: u64) -> SparseColumns {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    let mut x = ndarray::Array2::<f32>::zeros((rows, cols));
    for v in x.iter_mut() {
        if rng.gen_bool(density) {
            *v = rng.gen_range(-1.0f32..1.0);
        }
    }
    // Some strongly correlated neighbours.
    for j in (1..cols).step_by(3) {
        let previous = x.column(j - 1).to_owned();
        x.column_mut(j)
            .zip_mut_with(&previous, |a, b| *a += 2.0 * b);
    }
    SparseColumns::from_dense(&x)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn scatter_check_keeps_exactly_what_the_pairwise_check_keeps(
        seed in 0u64..1000,
        density in 0.05f64..0.6,
        rho in 0.05f32..0.9,
        limit in 1usize..12,
    ) {
        let (mut fast, mut slow) = fast_and_pairwise(density, seed);
        let mut candidates: Vec<usize> = (0..40).map(|j| (j * 17 + seed as usize) % 40).collect();
        candidates.push(candidates[3]);
        for round in 0..3 {
            let pool = &candidates[round * 5..];
            prop_assert_eq!(
                fast.keep_independent(pool, limit, rho),
                slow.keep_independent(pool, limit, rho)
            );
        }
        prop_assert_eq!(fast.keep_independent(&candidates, 40, 0.0).len(), 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Over many rounds the oracle switches columns from the scatter walk to neighbour
    /// lists; with coordinates in flight and without, every decision stays the pairwise
    /// check's.
    #[test]
    fn neighbour_lists_and_in_flight_keep_exactly_what_the_pairwise_check_keeps(
        seed in 0u64..1000,
        density in 0.05f64..0.5,
        rho in 0.05f32..0.9,
        limit in 1usize..10,
    ) {
        let (mut fast, mut slow) = fast_and_pairwise(density, seed);
        for round in 0..60usize {
            let candidates: Vec<usize> =
                (0..40).map(|j| (j * 7 + round * 13 + seed as usize) % 40).collect();
            let in_flight: Vec<usize> = (0..round % 4).map(|j| (j * 11 + round) % 40).collect();
            let (pool, in_flight) = (&candidates[round % 7..], &in_flight[..]);
            let kept = fast.keep_independent_around(pool, limit, rho, in_flight);
            prop_assert_eq!(&kept, &slow.keep_independent_around(pool, limit, rho, in_flight));
            prop_assert!(kept.iter().all(|k| !in_flight.contains(k)));
        }
        prop_assert!(fast.neighbour_lists_built() > 0, "no column ever switched to a list");
    }
}

#[test]
fn in_flight_coordinates_are_neither_chosen_nor_correlated_with_the_choice() {
    // Columns 0 and 1 are identical; 2 is independent of both.
    let x = ndarray::array![[1.0f32, 1.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]];
    let mut s = cyclic_over_columns_of(&x);
    assert_eq!(s.filter_candidates_around(vec![0, 1, 2], &[0]), vec![2]);
    assert_eq!(s.filter_candidates_around(vec![0, 1, 2], &[]), vec![0, 2]);
    let mut plain =
        LassoScheduler::new(3, SchedulerConfig::new(ScheduleMode::Cyclic, 3), None).unwrap();
    assert_eq!(
        plain.filter_candidates_around(vec![0, 1, 2], &[1]),
        vec![0, 2]
    );
}

/// Lazy draws in chunks choose exactly what drawing the whole pool and checking it in
/// order chooses, round after round (with coordinates in flight too).
#[test]
fn lazy_dynamic_rounds_choose_what_the_whole_pool_would() {
    let x = Arc::new(random_sparse(40, 60, 0.2, 7));
    let scheduler = |x: &Arc<SparseColumns>| {
        let oracle = ColumnCorrelationCache::new(x.clone(), 1000);
        filtered(60, (ScheduleMode::Dynamic, 8, 30, 3), 0.3, oracle)
    };
    let (mut lazy, mut whole) = (scheduler(&x), scheduler(&x));
    let mut in_flight: Vec<usize> = Vec::new();
    let mut rounds_with_rejections = 0;
    for round in 0..40 {
        whole.import_state(&lazy.export_state()).unwrap();
        let chosen = lazy.next_round_around(&in_flight);
        let pool = whole.draw_candidates();
        let expected = whole.filter_candidates_around(pool, &in_flight);
        assert_eq!(chosen, expected, "round {round}");
        if lazy.take_filter_rejections() > 0 {
            rounds_with_rejections += 1;
        }
        let changes: Vec<(usize, f32)> = chosen
            .iter()
            .map(|&j| (j, ((j * 7 + round) % 5) as f32 * 0.01))
            .collect();
        lazy.commit(&changes);
        in_flight = chosen;
    }
    assert!(
        rounds_with_rejections > 0,
        "the check never rejected anything"
    );
}

/// Columns of `nnz` entries of magnitude 1 and random sign on random rows.
fn equal_magnitude_sparse(rows: usize, cols: usize, nnz: usize, seed: u64) -> SparseColumns {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    let mut x = ndarray::Array2::<f32>::zeros((rows, cols));
    for j in 0..cols {
        for i in rand::seq::index::sample(&mut rng, rows, nnz) {
            x[[i, j]] = if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
        }
    }
    SparseColumns::from_dense(&x)
}

/// Largest eigenvalue of the block's Gram matrix with columns scaled to unit norm (power
/// iteration on a small dense copy).
fn block_gram_lambda_max(x: &SparseColumns, block: &[usize]) -> f64 {
    let unit: Vec<Vec<f64>> = block
        .iter()
        .map(|&k| {
            let mut dense = vec![0.0; x.n_rows];
            let (rows, vals) = x.column(k);
            let norm = vals
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                .sqrt();
            for (&i, &v) in rows.iter().zip(vals) {
                dense[i as usize] = f64::from(v) / norm;
            }
            dense
        })
        .collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let gram: Vec<Vec<f64>> = unit
        .iter()
        .map(|a| unit.iter().map(|b| dot(a, b)).collect())
        .collect();
    let mut v = vec![1.0; block.len()];
    let mut lambda = 0.0;
    for _ in 0..500 {
        let w: Vec<f64> = gram.iter().map(|row| dot(row, &v)).collect();
        let norm = dot(&w, &w).sqrt();
        if norm == 0.0 {
            return 0.0;
        }
        lambda = dot(&v, &w) / dot(&v, &v);
        v = w.iter().map(|x| x / norm).collect();
    }
    lambda
}

#[test]
fn row_load_bound_keeps_one_column_per_shared_row() {
    // Ten columns on the same four rows: each pair shares every row, so a block may hold
    // one of them under a bound below 2; with the pairwise check alone (rho = 1) it takes
    // every column that is not an exact multiple of a kept one.
    let x = Arc::new(equal_magnitude_sparse(4, 10, 4, 7));
    let candidates: Vec<usize> = (0..10).collect();
    let mut bounded = ColumnCorrelationCache::new(x.clone(), 100).with_row_load_bound(1.5);
    assert_eq!(bounded.keep_independent(&candidates, 10, 1.0).len(), 1);
    let mut pairwise = ColumnCorrelationCache::new(x.clone(), 100);
    let kept = pairwise.keep_independent(&candidates, 10, 1.0);
    assert!(kept.len() > 1, "{kept:?}");
    // Disjoint columns never load a shared row: all of them fit.
    let disjoint = Arc::new(SparseColumns::from_dense(&ndarray::Array2::<f32>::eye(6)));
    let mut bounded = ColumnCorrelationCache::new(disjoint, 100).with_row_load_bound(1.0);
    assert_eq!(
        bounded.keep_independent(&[0, 1, 2, 3, 4, 5], 6, 0.3).len(),
        6
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// With equal-magnitude columns a row's load is its count of block columns, and the
    /// Schur test makes the bound an upper bound on the block Gram matrix's largest
    /// eigenvalue, in flight coordinates included. Without the bound the same candidates
    /// give blocks above it.
    #[test]
    fn row_load_bound_caps_the_block_gram_eigenvalue(
        seed in 0u64..1000,
        nnz in 2usize..6,
        bound in 1.0f32..3.0,
        n_in_flight in 0usize..4,
    ) {
        let (rows, cols) = (24, 60);
        let x = Arc::new(equal_magnitude_sparse(rows, cols, nnz, seed));
        let candidates: Vec<usize> =
            (0..cols).map(|j| (j * 17 + seed as usize) % cols).collect();
        let mut bounded =
            ColumnCorrelationCache::new(x.clone(), 1000).with_row_load_bound(bound);
        // In flight: an earlier round's block, chosen under the same bound.
        let in_flight = bounded.keep_independent(&candidates, n_in_flight, 0.9);
        let in_flight = &in_flight[..];
        let pool = &candidates[n_in_flight..];
        let kept = bounded.keep_independent_around(pool, cols, 0.9, in_flight);
        prop_assert!(kept.iter().all(|k| !in_flight.contains(k)));
        let block: Vec<usize> = in_flight.iter().chain(&kept).copied().collect();
        let lambda = block_gram_lambda_max(&x, &block);
        prop_assert!(lambda <= f64::from(bound) + 1e-6, "lambda {lambda} > bound {bound}");
        // Every kept column is also pairwise below rho with the rest (the bound adds to
        // the pairwise check, it does not replace it).
        let mut pairwise = ColumnCorrelationCache::new(x.clone(), 1000);
        for (a, &j) in block.iter().enumerate() {
            for &k in &block[a + 1..] {
                prop_assert!(pairwise.abs_correlation(j, k) < 0.9);
            }
        }
    }
}

#[test]
fn without_the_bound_pairwise_independent_blocks_exceed_it() {
    // The reason for the bound: on 24 rows, 60 columns of 4 non-zeros pairwise below 0.9
    // form a block whose Gram matrix has a largest eigenvalue well above 2.
    let x = Arc::new(equal_magnitude_sparse(24, 60, 4, 3));
    let candidates: Vec<usize> = (0..60).collect();
    let mut pairwise = ColumnCorrelationCache::new(x.clone(), 1000);
    let kept = pairwise.keep_independent(&candidates, 60, 0.9);
    assert!(block_gram_lambda_max(&x, &kept) > 2.0);
    let mut bounded = ColumnCorrelationCache::new(x.clone(), 1000).with_row_load_bound(1.5);
    let kept = bounded.keep_independent(&candidates, 60, 0.9);
    assert!(block_gram_lambda_max(&x, &kept) <= 1.5 + 1e-6);
}
