use super::*;
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use proptest::prelude::*;
use rand::Rng;

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
        layout: MfLayout {
            rank: 3,
            biases: false,
        },
        ridge: MfRidge {
            lambda: 0.05,
            per_rating: false,
        },
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
        layout: MfLayout {
            rank: 2,
            biases: false,
        },
        ridge: MfRidge {
            lambda: 0.1,
            per_rating: false,
        },
        n_workers: 1,
        outer_iterations: 3,
        inner_iterations: 1,
        seed: 0,
    };
    let single = run_ccdpp(&problem.ratings, &config).unwrap();
    config.n_workers = 4;
    let multi = run_ccdpp(&problem.ratings, &config).unwrap();
    // Same algorithm from the same initial W (seeded per user): the curves agree up to the
    // order of floating-point sums.
    assert_eq!(single.train_rmse.len(), multi.train_rmse.len());
    for (a, b) in single.train_rmse.iter().zip(&multi.train_rmse) {
        assert!(
            (a - b).abs() < 1e-4,
            "{:?} vs {:?}",
            single.train_rmse,
            multi.train_rmse
        );
    }
}

#[test]
fn a_user_starts_from_the_same_row_whatever_the_worker_count() {
    let problem = low_rank_ratings(&LowRankParams {
        n_users: 30,
        n_items: 10,
        rank: 3,
        observed_fraction: 0.5,
        noise_std: 0.1,
        seed: 5,
    })
    .unwrap();
    let layout = MfLayout {
        rank: 3,
        biases: true,
    };
    let width = layout.width();
    let row_of = |p: usize| {
        let partition = MfPartition::balanced(&problem.ratings, p);
        let mut rows = vec![Vec::new(); 30];
        for users in &partition.bucket_users {
            let w = layout.initial_w_of_users(users, 9);
            for (i, &u) in users.iter().enumerate() {
                rows[u as usize] = w[i * width..(i + 1) * width].to_vec();
            }
        }
        rows
    };
    let one = row_of(1);
    assert_eq!(one, row_of(2));
    assert_eq!(one, row_of(4));
    // Rows differ between users and lie in [0, 1/sqrt(3)), with the bias columns [0, 1].
    assert_ne!(one[0], one[1]);
    for row in &one {
        assert!(
            row[..3]
                .iter()
                .all(|&x| (0.0..1.0 / 3f32.sqrt()).contains(&x))
        );
        assert_eq!(&row[3..], &[0.0, 1.0]);
    }
    // Another job seed gives another start.
    let partition = MfPartition::balanced(&problem.ratings, 1);
    assert_ne!(
        layout.initial_w_of_users(&partition.bucket_users[0], 9),
        layout.initial_w_of_users(&partition.bucket_users[0], 10)
    );
}

/// User 0 rates items 0 and 1 (2, 4), user 1 rates item 0 (3); rank 1, W = (1, 2), H = 0.
fn two_user_worker() -> (MfWorker, FactorBlock) {
    let ratings = Ratings {
        n_users: 2,
        n_items: 2,
        entries: vec![(0, 0, 2.0), (0, 1, 4.0), (1, 0, 3.0)],
        id_mapping: None,
    };
    let partition = MfPartition::balanced(&ratings, 1);
    let block = FactorBlock::new(0, 1, partition.bucket_items[0].clone(), vec![0.0; 2]);
    // Local rows follow the bucket's user order.
    let w_init = partition.bucket_users[0]
        .iter()
        .map(|&u| if u == 0 { 1.0 } else { 2.0 })
        .collect();
    let worker = MfWorker::new(
        0,
        &partition,
        &ratings,
        1,
        w_init,
        std::slice::from_ref(&block),
    )
    .unwrap();
    (worker, block)
}

fn value_of(ids: &[u32], values: &[f32], id: u32) -> f64 {
    let at = ids.iter().position(|&x| x == id).unwrap();
    f64::from(values[at])
}

#[test]
fn weighted_lambda_scales_the_l2_term_by_rating_counts() {
    for per_rating in [false, true] {
        let ridge = MfRidge {
            lambda: 0.5,
            per_rating,
        };
        let l2 = |n: f64| if per_rating { 0.5 * n } else { 0.5 };
        let (mut worker, mut block) = two_user_worker();
        worker.begin_visit(&mut block);
        worker.accumulate_h(&mut block, 0);
        worker.finalize_h(&mut block, 0, ridge, 1);
        // h_j = sum_i R_ij w_i / (lambda_j + sum_i w_i^2), item 0 has 2 ratings, item 1 one.
        let h0 = (2.0 * 1.0 + 3.0 * 2.0) / (l2(2.0) + 1.0 + 4.0);
        let h1 = (4.0 * 1.0) / (l2(1.0) + 1.0);
        let got_h0 = value_of(&block.item_ids, &block.factors, 0);
        let got_h1 = value_of(&block.item_ids, &block.factors, 1);
        assert!(
            (got_h0 - h0).abs() < 1e-6,
            "{per_rating}: h0 {got_h0} vs {h0}"
        );
        assert!(
            (got_h1 - h1).abs() < 1e-6,
            "{per_rating}: h1 {got_h1} vs {h1}"
        );
        worker.begin_visit(&mut block);
        worker.accumulate_w(&block, 0);
        worker.finalize_w(0, ridge);
        // w_u = sum_j R_uj h_j / (lambda_u + sum_j h_j^2): user 0 has 2 ratings, user 1 one.
        let w0 = (2.0 * h0 + 4.0 * h1) / (l2(2.0) + h0 * h0 + h1 * h1);
        let w1 = (3.0 * h0) / (l2(1.0) + h0 * h0);
        let got_w0 = value_of(worker.user_ids(), worker.factors(), 0);
        let got_w1 = value_of(worker.user_ids(), worker.factors(), 1);
        assert!(
            (got_w0 - w0).abs() < 1e-5,
            "{per_rating}: w0 {got_w0} vs {w0}"
        );
        assert!(
            (got_w1 - w1).abs() < 1e-5,
            "{per_rating}: w1 {got_w1} vs {w1}"
        );
    }
}

#[test]
fn bias_steps_fit_additive_ratings_and_keep_the_constant_columns() {
    // rating = 3 + a_u + c_i + small noise: an additive model the biases fit exactly and a
    // rank-1 factorisation alone cannot.
    let (n_users, n_items) = (30u32, 20u32);
    let mut rng = StdRng::seed_from_u64(5);
    let a: Vec<f32> = (0..n_users).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let c: Vec<f32> = (0..n_items).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let mut entries = Vec::new();
    for u in 0..n_users {
        for i in 0..n_items {
            if rng.gen_bool(0.5) {
                let noise: f32 = rng.gen_range(-0.01..0.01);
                entries.push((u, i, 3.0 + a[u as usize] + c[i as usize] + noise));
            }
        }
    }
    let ratings = Ratings {
        n_users: n_users as usize,
        n_items: n_items as usize,
        entries,
        id_mapping: None,
    };
    let mut config = CcdppConfig {
        layout: MfLayout {
            rank: 1,
            biases: false,
        },
        ridge: MfRidge {
            lambda: 0.01,
            per_rating: false,
        },
        n_workers: 3,
        outer_iterations: 10,
        inner_iterations: 1,
        seed: 4,
    };
    let plain = run_ccdpp(&ratings, &config).unwrap();
    config.layout.biases = true;
    let biased = run_ccdpp(&ratings, &config).unwrap();
    let plain_rmse = *plain.train_rmse.last().unwrap();
    let biased_rmse = *biased.train_rmse.last().unwrap();
    assert!(
        biased_rmse < 0.05 && biased_rmse < 0.5 * plain_rmse,
        "biases {biased_rmse} vs none {plain_rmse}"
    );
    // The residuals the workers keep agree with the gathered full-width model.
    let direct = rmse(&ratings, &biased.user_factors, &biased.item_factors);
    assert!(
        (direct - biased_rmse).abs() < 1e-4,
        "{direct} vs {biased_rmse}"
    );
    assert_eq!(biased.user_factors.ncols(), 3);
    assert!(biased.user_factors.column(2).iter().all(|&x| x == 1.0));
    assert!(biased.item_factors.column(1).iter().all(|&x| x == 1.0));
    let layout = config.layout;
    let (w, h, bu, bi) = layout.split_model(&biased.user_factors, &biased.item_factors);
    assert_eq!((w.ncols(), h.ncols(), bu.len(), bi.len()), (1, 1, 30, 20));
    // Without a mean, the biases and the rank-1 term share the offset; the spread of the
    // user biases still follows the true offsets.
    let corr = correlation(&bu, &a);
    assert!(corr > 0.9, "user bias vs true offset correlation {corr}");
}

fn correlation(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len() as f64;
    let mx = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let my = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        let (a, b) = (f64::from(a) - mx, f64::from(b) - my);
        sxy += a * b;
        sxx += a * a;
        syy += b * b;
    }
    sxy / (sxx * syy).sqrt()
}

#[test]
fn a_rotation_of_test_scores_is_the_rmse_of_the_gathered_factors() {
    let problem = low_rank_ratings(&LowRankParams {
        n_users: 30,
        n_items: 20,
        rank: 2,
        observed_fraction: 0.5,
        noise_std: 0.1,
        seed: 4,
    })
    .unwrap();
    let (train, test) = problem.ratings.train_test_split(0.2, 3).unwrap();
    let config = CcdppConfig {
        layout: MfLayout {
            rank: 2,
            biases: true,
        },
        ridge: MfRidge {
            lambda: 0.1,
            per_rating: false,
        },
        n_workers: 3,
        outer_iterations: 1,
        inner_iterations: 1,
        seed: 1,
    };
    let mut cluster = MfCluster::new(&train, &config).unwrap();
    let partition = cluster.partition.clone();
    cluster.workers = std::mem::take(&mut cluster.workers)
        .into_iter()
        .map(|w| w.with_test(&partition, &test))
        .collect();
    for step in config.layout.sweep() {
        cluster.update_step(step);
    }
    // One rotation: every worker meets every block once, so every test rating is scored
    // once against the current W and H.
    cluster.rotation(|w, b| w.score_test(b));
    let (mut sq, mut n) = (0.0, 0u64);
    for w in &mut cluster.workers {
        let (s, c) = w.take_test_error();
        sq += s;
        n += c;
    }
    assert_eq!(n as usize, test.entries.len());
    let (user_factors, item_factors) = cluster.factors();
    let direct = rmse(&test, &user_factors, &item_factors);
    let scored = (sq / n as f64).sqrt();
    assert!(
        (scored - direct).abs() < 1e-6 * direct,
        "{scored} vs {direct}"
    );
    // Taken: the next rotation starts from nothing.
    assert_eq!(cluster.workers[0].take_test_error(), (0.0, 0));
}

// The serial CCD++ reference run the tests compare with.

/// Configuration of [`run_ccdpp`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CcdppConfig {
    /// Rank and biases.
    pub layout: MfLayout,
    /// L2 weights.
    pub ridge: MfRidge,
    /// Workers.
    pub n_workers: usize,
    /// Sweeps over all coordinates.
    pub outer_iterations: usize,
    /// Alternations of (h_k, w_k) per coordinate per outer iteration.
    pub inner_iterations: usize,
    /// Seed of the initial factors.
    pub seed: u64,
}

/// Result of [`run_ccdpp`].
#[derive(Debug, Clone, PartialEq)]
pub struct MfRun {
    /// `n_users x width` ([`MfLayout::width`]: with biases the rows end `[b_user, 1]`).
    pub user_factors: Array2<f32>,
    /// `n_items x width` (with biases the rows end `[1, b_item]`).
    pub item_factors: Array2<f32>,
    /// Training RMSE before the first and after every outer iteration.
    pub train_rmse: Vec<f64>,
}

/// Everything of a CCD++ job in one process.
pub struct MfCluster {
    /// The rotation.
    pub schedule: RotationSchedule,
    /// Users and items by bucket.
    pub partition: MfPartition,
    /// The workers.
    pub workers: Vec<MfWorker>,
    /// The H blocks.
    pub blocks: Vec<FactorBlock>,
    /// L2 weights.
    pub ridge: MfRidge,
    /// Columns of W and H.
    pub layout: MfLayout,
}

impl MfCluster {
    /// W starts uniform in `[0, 1/sqrt(rank))`, H at zero (so the residual is R and the first
    /// H phase is a ridge fit against W); biases start at zero.
    pub fn new(ratings: &Ratings, config: &CcdppConfig) -> Result<Self, StradsModelError> {
        if config.layout.rank == 0
            || config.n_workers == 0
            || config.ridge.lambda.is_nan()
            || config.ridge.lambda < 0.0
        {
            return Err(StradsModelError::InvalidConfig(
                "need rank >= 1, n_workers >= 1, lambda >= 0".into(),
            ));
        }
        let p = config.n_workers;
        let layout = config.layout;
        let width = layout.width();
        let partition = MfPartition::balanced(ratings, p);
        let blocks: Vec<FactorBlock> = partition
            .bucket_items
            .iter()
            .enumerate()
            .map(|(b, ids)| FactorBlock::new(b, width, ids.clone(), layout.initial_h(ids.len())))
            .collect();
        let workers = (0..p)
            .map(|w| {
                let init = layout.initial_w_of_users(&partition.bucket_users[w], config.seed);
                MfWorker::new(w, &partition, ratings, width, init, &blocks)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MfCluster {
            schedule: RotationSchedule { p },
            partition,
            workers,
            blocks,
            ridge: config.ridge,
            layout,
        })
    }

    /// One full rotation: in every sub-round each worker visits the block it holds and runs
    /// `visit` on it.
    fn rotation(&mut self, mut visit: impl FnMut(&mut MfWorker, &mut FactorBlock)) {
        let p = self.schedule.p;
        for t in 0..p {
            for w in 0..p {
                let b = self.schedule.block_held(w, t);
                let worker = &mut self.workers[w];
                let block = &mut self.blocks[b];
                worker.begin_visit(block);
                visit(worker, block);
            }
        }
    }

    /// Runs one sweep step: an H rotation for `h_k` then a W rotation for `w_k` (each only
    /// when the step updates that side).
    pub fn update_step(&mut self, step: CoordinateStep) {
        let (ridge, p, k) = (self.ridge, self.schedule.p, step.k);
        if step.update_h {
            self.rotation(|worker, block| worker.accumulate_h(block, k));
            // The last visitor finalises; any worker knows every item's count.
            if let Some(worker) = self.workers.first() {
                self.blocks
                    .iter_mut()
                    .for_each(|b| worker.finalize_h(b, k, ridge, p));
            }
        }
        if step.update_w {
            self.rotation(|worker, block| worker.accumulate_w(block, k));
            self.workers.iter_mut().for_each(|w| w.finalize_w(k, ridge));
        }
    }

    /// Applies every pending change (one rotation without updates) and returns the RMSE from
    /// the residuals.
    pub fn train_rmse(&mut self) -> f64 {
        self.rotation(|_, _| {});
        let (sum, n) = self
            .workers
            .iter()
            .map(MfWorker::squared_error)
            .fold((0.0, 0), |(a, b), (c, d)| (a + c, b + d));
        if n == 0 { 0.0 } else { (sum / n as f64).sqrt() }
    }

    /// Gathers W and H into dense matrices (full width: [`MfLayout::split_model`] separates
    /// the biases).
    pub fn factors(&self) -> (Array2<f32>, Array2<f32>) {
        let rank = self.layout.width();
        let mut w = Array2::zeros((self.partition.user_bucket.len(), rank));
        for worker in &self.workers {
            for (r, &u) in worker.user_ids.iter().enumerate() {
                for k in 0..rank {
                    w[[u as usize, k]] = worker.w[r * rank + k];
                }
            }
        }
        let mut h = Array2::zeros((self.partition.item_bucket.len(), rank));
        for block in &self.blocks {
            for (c, &i) in block.item_ids.iter().enumerate() {
                for k in 0..rank {
                    h[[i as usize, k]] = block.factors[c * rank + k];
                }
            }
        }
        (w, h)
    }
}

/// Serial CCD++ driver with P in-process workers.
pub fn run_ccdpp(ratings: &Ratings, config: &CcdppConfig) -> Result<MfRun, StradsModelError> {
    let mut cluster = MfCluster::new(ratings, config)?;
    let mut train_rmse = vec![cluster.train_rmse()];
    let sweep = config.layout.sweep();
    for _ in 0..config.outer_iterations {
        for &step in &sweep {
            // A bias has a closed form: repeating its step would change nothing.
            let repeats = if step.update_h && step.update_w {
                config.inner_iterations.max(1)
            } else {
                1
            };
            for _ in 0..repeats {
                cluster.update_step(step);
            }
        }
        train_rmse.push(cluster.train_rmse());
        tracing::debug!(rmse = train_rmse.last().copied(), "ccd++ outer iteration");
    }
    let (user_factors, item_factors) = cluster.factors();
    Ok(MfRun {
        user_factors,
        item_factors,
        train_rmse,
    })
}
