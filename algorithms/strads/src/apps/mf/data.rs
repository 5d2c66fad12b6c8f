//! An MF node's ratings, read in streaming passes so that no node holds the whole rating
//! set: a first pass counts the ratings (which fixes the train/test split,
//! [`HeldOutMask`]), a second counts each user's and item's training ratings (which fix the
//! partition, [`MfPartition::from_counts`]) and sums them (the training mean), a third hands
//! a worker its users' ratings one by one ([`StradsMfSettings::visit_split`]). A file is read
//! three times, synthetic ratings are drawn three times; the split, the partition, the
//! mean and every worker's ratings and their order are those of the whole load
//! ([`StradsMfSettings::load_centred`]). Every pass digests what it read ([`ReadDigest`]) and
//! a pass that read something else than the first (a file edited meanwhile) is an error.

use std::path::Path;

use super::StradsMfSettings;
use crate::core::StradsModelError;
use crate::core::mf::MfPartition;
use crate::error::StradsError;
use petrel_ml::MlError;
use petrel_ml::data::synthetic::stream_low_rank_ratings;
use petrel_ml::data::{HeldOutMask, Ratings, ReadDigest, scan_ratings};

/// Which side of the split a rating is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A training rating.
    Train,
    /// A held-out rating (the `test_fraction` split or the `test_data` file).
    Test,
}

/// How the test ratings are chosen.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    /// By the seeded split of the ratings (`test_fraction`).
    Mask(HeldOutMask),
    /// From the `test_data` file (every rating of `data` trains).
    File(std::path::PathBuf),
}

/// What every node knows of the ratings without holding them: the matrix's shape and ids,
/// the split, each user's and item's training rating count and the training mean.
#[derive(Debug, Clone, PartialEq)]
pub struct MfRatingsSummary {
    /// Users, items and the file's ids (no entries).
    pub shape: Ratings,
    /// Ratings read (train and, with the `test_fraction` split, test).
    pub ratings: usize,
    /// Training ratings.
    pub train_ratings: usize,
    /// Training ratings of each user (index = user).
    pub user_train_counts: Vec<usize>,
    /// Training ratings of each item (index = item).
    pub item_train_counts: Vec<usize>,
    /// Test ratings of each user with the `test_fraction` split (zeros with `test_data`).
    pub user_test_counts: Vec<usize>,
    /// Test ratings of each item with the `test_fraction` split (zeros with `test_data`).
    pub item_test_counts: Vec<usize>,
    /// The mean taken off the ratings (`global_mean`; 0 otherwise).
    pub mean: f32,
    held: Held,
    /// What the first pass read ([`ReadDigest::finish`]): every later pass must read the
    /// same, or the split, partition and mean would describe another rating set.
    read: (u64, u64),
}

impl MfRatingsSummary {
    /// The partition of the training ratings over `workers` ([`MfPartition::balanced`] of
    /// the whole training set).
    pub fn partition(&self, workers: usize) -> MfPartition {
        MfPartition::from_counts(&self.user_train_counts, &self.item_train_counts, workers)
    }

    /// Per block of `partition`, at most how many of worker `worker`'s ratings can fall in
    /// it: the fewer of its users' ratings and the block's items' ratings (`test`: the test
    /// ratings, else the training ones). Reserving this much never moves a block's ratings
    /// while they are read (a vector that grows by doubling would briefly hold them twice)
    /// and costs no memory beyond what is written.
    pub fn block_bounds(&self, partition: &MfPartition, worker: usize, test: bool) -> Vec<usize> {
        let (users, items) = if test {
            (&self.user_test_counts, &self.item_test_counts)
        } else {
            (&self.user_train_counts, &self.item_train_counts)
        };
        let sum = |counts: &[usize], ids: &[u32]| -> usize {
            ids.iter()
                .map(|&id| counts.get(id as usize).copied().unwrap_or(0))
                .sum()
        };
        let mine = partition
            .bucket_users
            .get(worker)
            .map_or(0, |ids| sum(users, ids));
        partition
            .bucket_items
            .iter()
            .map(|ids| sum(items, ids).min(mine))
            .collect()
    }

    /// What every node's summary of one rating set has in common, digested: the first
    /// pass's digest of every rating read. Nodes compare it before the first round.
    pub fn digest(&self) -> u64 {
        let mut d = ReadDigest::default();
        d.add(self.read.0);
        d.add(self.read.1);
        d.value()
    }

    /// Every item's training rating count as an MF worker keeps it.
    pub fn item_counts_u32(&self) -> Vec<u32> {
        self.item_train_counts
            .iter()
            .map(|&c| u32::try_from(c).unwrap_or(u32::MAX))
            .collect()
    }
}

impl StradsMfSettings {
    /// One pass over the ratings (the file, or the synthetic draw), each handed to `visit`
    /// in order; returns the matrix without entries.
    fn scan(&self, visit: impl FnMut(u32, u32, f32)) -> Result<Ratings, StradsError> {
        Ok(match &self.data {
            Some(path) => scan_ratings(path, visit)?,
            None => stream_low_rank_ratings(&self.synthetic, visit)?.ratings,
        })
    }

    /// The ratings' summary in two passes, holding none of them (a `test_data` file is
    /// read later, by [`StradsMfSettings::visit_split`]).
    pub fn summary(&self) -> Result<MfRatingsSummary, StradsError> {
        Ok(self.summarise(false)?.0)
    }

    /// [`StradsMfSettings::summary`] and the test ratings (centred like the training ones, read
    /// from `test_data` if set), what the scheduler keeps for the final test RMSE: the same
    /// as [`StradsMfSettings::load_centred`]'s.
    pub fn summary_and_test(&self) -> Result<(MfRatingsSummary, Ratings), StradsError> {
        self.summarise(true)
    }

    fn summarise(&self, keep_test: bool) -> Result<(MfRatingsSummary, Ratings), StradsError> {
        let (mut ratings, mut first) = (0usize, ReadDigest::default());
        let shape = self.scan(|u, i, r| {
            ratings += 1;
            first.add_triplet(u, i, r);
        })?;
        if ratings == 0 {
            return Err(StradsModelError::InvalidConfig("no ratings".into()).into());
        }
        if self.rank == 0 {
            return Err(StradsModelError::InvalidConfig("rank must be >= 1".into()).into());
        }
        let held = match &self.test_data {
            Some(path) => Held::File(path.clone()),
            None => Held::Mask(HeldOutMask::new(ratings, self.test_fraction, self.seed)?),
        };
        let mut user_train_counts = vec![0usize; shape.n_users];
        let mut item_train_counts = vec![0usize; shape.n_items];
        let mut user_test_counts = vec![0usize; shape.n_users];
        let mut item_test_counts = vec![0usize; shape.n_items];
        // As `Iterator::sum` adds, in the same order: the mean of the whole load, bit for bit.
        let mut sum: f64 = std::iter::empty::<f64>().sum();
        let (mut train_ratings, mut k, mut outside) = (0usize, 0usize, false);
        let mut second = ReadDigest::default();
        let mut test = Ratings {
            entries: Vec::new(),
            ..shape.clone()
        };
        if let (Held::Mask(mask), true) = (&held, keep_test) {
            test.entries.reserve_exact(mask.n_test());
        }
        self.scan(|u, i, r| {
            second.add_triplet(u, i, r);
            let held_out = matches!(&held, Held::Mask(mask) if mask.is_test(k));
            k += 1;
            let (users, items) = if held_out {
                if keep_test {
                    test.entries.push((u, i, r));
                }
                (&mut user_test_counts, &mut item_test_counts)
            } else {
                train_ratings += 1;
                sum += f64::from(r);
                (&mut user_train_counts, &mut item_train_counts)
            };
            match (users.get_mut(u as usize), items.get_mut(i as usize)) {
                (Some(cu), Some(ci)) => {
                    *cu += 1;
                    *ci += 1;
                }
                _ => outside = true,
            }
        })?;
        let read = first.finish();
        if k != ratings || outside || second.finish() != read {
            return Err(changed(self.data.as_deref()));
        }
        let mean = if self.global_mean && train_ratings > 0 {
            (sum / train_ratings as f64) as f32
        } else {
            0.0
        };
        if let (Held::File(path), true) = (&held, keep_test) {
            test = self.held_out(&shape, path)?;
        }
        if self.global_mean {
            test.entries.iter_mut().for_each(|e| e.2 -= mean);
        }
        let summary = MfRatingsSummary {
            shape,
            ratings,
            train_ratings,
            user_train_counts,
            item_train_counts,
            user_test_counts,
            item_test_counts,
            mean,
            held,
            read,
        };
        Ok((summary, test))
    }

    /// The `test_data` file's ratings in the training matrix's indices.
    pub(super) fn held_out(&self, shape: &Ratings, path: &Path) -> Result<Ratings, StradsError> {
        let (test, left_out) = shape.held_out_from(path)?;
        if left_out > 0 {
            tracing::debug!(
                left_out,
                "held-out pairs without a training rating for their user or item"
            );
        }
        Ok(test)
    }

    /// The third pass: every rating with its side of the split, minus the training mean
    /// (with `global_mean`), in the order [`StradsMfSettings::load_centred`] gives the training
    /// and the test ratings (training ratings in file order, then, with `test_data`, that
    /// file's; with the `test_fraction` split the two sides interleave in file order).
    pub fn visit_split(
        &self,
        summary: &MfRatingsSummary,
        mut visit: impl FnMut(Side, u32, u32, f32),
    ) -> Result<(), StradsError> {
        let centre = |r: f32| {
            if self.global_mean {
                r - summary.mean
            } else {
                r
            }
        };
        let (mut k, mut again) = (0usize, ReadDigest::default());
        self.scan(|u, i, r| {
            again.add_triplet(u, i, r);
            let side = match &summary.held {
                Held::Mask(mask) if mask.is_test(k) => Side::Test,
                _ => Side::Train,
            };
            k += 1;
            visit(side, u, i, centre(r));
        })?;
        if k != summary.ratings || again.finish() != summary.read {
            return Err(changed(self.data.as_deref()));
        }
        if let Held::File(path) = &summary.held {
            for &(u, i, r) in &self.held_out(&summary.shape, path)?.entries {
                visit(Side::Test, u, i, centre(r));
            }
        }
        Ok(())
    }
}

/// A second read of the ratings disagreed with the first.
fn changed(data: Option<&Path>) -> StradsError {
    match data {
        Some(path) => MlError::ChangedWhileRead {
            path: path.to_path_buf(),
        }
        .into(),
        // Drawn from a seed: only a bug could make two draws differ.
        None => StradsModelError::InvalidConfig(
            "the synthetic ratings changed while they were drawn".into(),
        )
        .into(),
    }
}
