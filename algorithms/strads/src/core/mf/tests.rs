use super::*;
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use proptest::prelude::*;

#[test]
fn buckets_balance_by_load() {
    let loads = [10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
    let buckets = balanced_buckets(&loads, 2);
    let mut per = [0usize; 2];
    for (i, &b) in buckets.iter().enumerate() {
        per[b as usize] += loads[i];
    }
    assert_eq!(per, [10, 10]);
}

proptest! {
    #[test]
    fn rotation_never_shares_a_block(p in 1usize..40, t in 0usize..200) {
        let s = RotationSchedule { p };
        let mut seen = vec![false; p];
        for w in 0..p {
            let b = s.block_held(w, t);
            prop_assert!(b < p);
            prop_assert!(!seen[b], "block {} held twice in sub-round {}", b, t);
            seen[b] = true;
            prop_assert_eq!(s.holder(b, t), w);
            // The block moves to the next holder in the next sub-round.
            prop_assert_eq!(s.block_held(s.next_holder(w), t + 1), b);
        }
    }

    #[test]
    fn bucket_loads_are_near_even(loads in proptest::collection::vec(0usize..50, 1..60), p in 1usize..6) {
        let buckets = balanced_buckets(&loads, p);
        let mut per = vec![0usize; p];
        for (i, &b) in buckets.iter().enumerate() {
            per[b as usize] += loads[i];
        }
        let max_item = *loads.iter().max().unwrap();
        let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
        // LPT guarantee: the spread never exceeds the largest single load.
        prop_assert!(hi - lo <= max_item);
    }
}

#[test]
fn ccdpp_fits_low_rank_data() {
    let problem = low_rank_ratings(&LowRankParams {
        n_users: 60,
        n_items: 40,
        rank: 3,
        observed_fraction: 0.4,
        noise_std: 0.01,
        seed: 9,
    })
    .unwrap();
    let (train, test) = problem.ratings.train_test_split(0.1, 1).unwrap();
    let config = CcdppConfig {
        rank: 3,
        lambda: 0.05,
        n_workers: 3,
        outer_iterations: 15,
        inner_iterations: 1,
        seed: 2,
    };
    let run = run_ccdpp(&train, &config).unwrap();
    let first = run.train_rmse[0];
    let last = *run.train_rmse.last().unwrap();
    assert!(last < 0.1 * first, "rmse {first} -> {last}");
    assert!(last < 0.1, "final train rmse {last}");
    // Residuals kept by the workers agree with the gathered factors.
    let direct = rmse(&train, &run.user_factors, &run.item_factors);
    assert!((direct - last).abs() < 1e-4, "{direct} vs {last}");
    assert!(rmse(&test, &run.user_factors, &run.item_factors) < 0.3);
}

#[test]
fn distributed_matches_single_worker() {
    let problem = low_rank_ratings(&LowRankParams {
        n_users: 20,
        n_items: 15,
        rank: 2,
        observed_fraction: 0.5,
        noise_std: 0.1,
        seed: 3,
    })
    .unwrap();
    let mut config = CcdppConfig {
        rank: 2,
        lambda: 0.1,
        n_workers: 1,
        outer_iterations: 3,
        inner_iterations: 1,
        seed: 0,
    };
    let single = run_ccdpp(&problem.ratings, &config).unwrap();
    config.n_workers = 4;
    let multi = run_ccdpp(&problem.ratings, &config).unwrap();
    // Same algorithm, different initial W draw order: compare the achieved fit instead.
    let (a, b) = (
        single.train_rmse.last().unwrap(),
        multi.train_rmse.last().unwrap(),
    );
    assert!((a - b).abs() < 0.05, "{a} vs {b}");
}
