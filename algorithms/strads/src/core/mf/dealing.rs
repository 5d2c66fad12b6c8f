//! Dynamic dealing of an MF worker's users: a re-deal at the start of an H rotation moves
//! whole users (their row of W, their training and test ratings) between workers. The
//! residuals are not moved: each worker folds the finalised changes into its own residuals
//! lazily, per block, so a moved user's residuals in the old owner's state are as stale as
//! that owner's view of each block. The new owner computes them afresh instead, `r - w.h`,
//! on its first visit of each block, when it holds the block's current H.

use super::{FactorBlock, LocalRating, MfPartition, MfWorker};
use crate::core::StradsModelError;
use serde::{Deserialize, Serialize};

/// A user moving between workers: its row of W and its ratings by global item id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovedUser {
    /// Global id.
    pub id: u32,
    /// Its row of W (full width).
    pub w: Vec<f32>,
    /// Training ratings `(item, rating)`.
    pub ratings: Vec<(u32, f32)>,
    /// Test ratings `(item, rating)`.
    pub test: Vec<(u32, f32)>,
}

/// The rating values behind a dealing worker's residuals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct DealtRatings {
    /// Per block, parallel to the worker's entries.
    values: Vec<Vec<f32>>,
    /// Per block, how many leading entries have a current residual.
    current: Vec<usize>,
}

impl DealtRatings {
    /// Records the value of a rating added to block `b` at the initial factors (current).
    pub(super) fn push(&mut self, b: usize, rating: f32) {
        if let (Some(values), Some(current)) = (self.values.get_mut(b), self.current.get_mut(b)) {
            values.push(rating);
            *current += 1;
        }
    }
}

impl MfWorker {
    /// Keeps every training rating's value from now on, so that users can move
    /// ([`MfWorker::release`], [`MfWorker::adopt`]); call it before adding ratings.
    pub fn keep_ratings(&mut self) -> Result<(), StradsModelError> {
        if self.blocks.iter().any(|b| !b.is_empty()) {
            return Err(StradsModelError::protocol(
                "keep_ratings after ratings were added",
            ));
        }
        let n = self.blocks.len();
        self.dealt = Some(DealtRatings {
            values: vec![Vec::new(); n],
            current: vec![0; n],
        });
        Ok(())
    }

    /// Gives up every user `keep` refuses, with its row of W and its ratings. Only between
    /// rotations: the W accumulators must be empty (they are after a W commit).
    pub fn release(
        &mut self,
        keep: impl Fn(u32) -> bool,
        partition: &MfPartition,
    ) -> Result<Vec<MovedUser>, StradsModelError> {
        let dealt = self.dealt.take().ok_or_else(|| {
            StradsModelError::protocol("a deal to an MF worker of static dealing")
        })?;
        let rank = self.rank;
        // New row of each old row (None: it leaves).
        let mut rows = Vec::with_capacity(self.user_ids.len());
        let mut moved = Vec::new();
        let (mut kept, mut next) = (Vec::new(), 0u32);
        for (r, &id) in self.user_ids.iter().enumerate() {
            if keep(id) {
                rows.push(Some(next));
                kept.push(r);
                next += 1;
            } else {
                rows.push(None);
                moved.push(MovedUser {
                    id,
                    w: self.w[r * rank..(r + 1) * rank].to_vec(),
                    ratings: Vec::new(),
                    test: Vec::new(),
                });
            }
        }
        let slot: Vec<Option<usize>> = {
            let mut at = 0;
            rows.iter()
                .map(|r| {
                    r.is_none().then(|| {
                        at += 1;
                        at - 1
                    })
                })
                .collect()
        };
        let mut values = Vec::with_capacity(self.blocks.len());
        let mut current = Vec::with_capacity(self.blocks.len());
        for (b, (entries, block_values)) in self.blocks.iter_mut().zip(dealt.values).enumerate() {
            let items = &partition.bucket_items[b];
            let fresh = dealt.current.get(b).copied().unwrap_or(0);
            let (mut keep_e, mut keep_v, mut keep_fresh) = (Vec::new(), Vec::new(), 0);
            for (i, (e, v)) in entries.iter().zip(block_values).enumerate() {
                match rows[e.row as usize] {
                    Some(row) => {
                        keep_fresh += usize::from(i < fresh);
                        keep_e.push(LocalRating { row, ..*e });
                        keep_v.push(v);
                    }
                    None => {
                        let m = slot[e.row as usize].unwrap_or_default();
                        moved[m].ratings.push((items[e.col as usize], v));
                    }
                }
            }
            *entries = keep_e;
            values.push(keep_v);
            current.push(keep_fresh);
        }
        for (b, tests) in self.test_blocks.iter_mut().enumerate() {
            let items = &partition.bucket_items[b];
            tests.retain_mut(|(row, col, rating)| match rows[*row as usize] {
                Some(new) => {
                    *row = new;
                    true
                }
                None => {
                    let m = slot[*row as usize].unwrap_or_default();
                    moved[m].test.push((items[*col as usize], *rating));
                    false
                }
            });
        }
        self.user_ids = kept.iter().map(|&r| self.user_ids[r]).collect();
        self.w = kept
            .iter()
            .flat_map(|&r| self.w[r * rank..(r + 1) * rank].to_vec())
            .collect();
        self.row_ratings = kept.iter().map(|&r| self.row_ratings[r]).collect();
        for (_, deltas) in &mut self.pending_w {
            *deltas = kept.iter().map(|&r| deltas[r]).collect();
        }
        self.numerators = vec![0.0; kept.len()];
        self.denominators = vec![0.0; kept.len()];
        self.dealt = Some(DealtRatings { values, current });
        Ok(moved)
    }

    /// Takes users another worker released; their residuals are computed on this worker's
    /// next visit of each block.
    pub fn adopt(
        &mut self,
        users: Vec<MovedUser>,
        partition: &MfPartition,
    ) -> Result<(), StradsModelError> {
        let n_items = partition.item_bucket.len();
        let fits = |u: &MovedUser| {
            u.w.len() == self.rank
                && u.ratings
                    .iter()
                    .chain(&u.test)
                    .all(|&(i, _)| (i as usize) < n_items)
        };
        if let Some(bad) = users.iter().find(|u| !fits(u)) {
            return Err(StradsModelError::protocol(format!(
                "moved user {} does not fit (rank {}, {} items)",
                bad.id, self.rank, n_items
            )));
        }
        let dealt = self.dealt.as_mut().ok_or_else(|| {
            StradsModelError::protocol("a deal to an MF worker of static dealing")
        })?;
        for user in users {
            let row = self.user_ids.len() as u32;
            self.user_ids.push(user.id);
            self.w.extend_from_slice(&user.w);
            self.row_ratings.push(user.ratings.len() as u32);
            self.numerators.push(0.0);
            self.denominators.push(0.0);
            for (_, deltas) in &mut self.pending_w {
                // Its residuals are computed afresh, past every pending change.
                deltas.push(0.0);
            }
            for (i, rating) in user.ratings {
                let (b, col) = place(partition, i);
                self.blocks[b].push(LocalRating {
                    row,
                    col,
                    residual: 0.0,
                });
                dealt.values[b].push(rating);
            }
            for (i, rating) in user.test {
                let (b, col) = place(partition, i);
                self.test_blocks[b].push((row, col, rating));
            }
        }
        Ok(())
    }

    /// Computes `r - w.h` for the entries of `block` adopted since its last visit.
    pub(super) fn refresh(&mut self, block: &FactorBlock) {
        let Some(dealt) = &mut self.dealt else {
            return;
        };
        let b = block.block;
        let rank = self.rank;
        let from = dealt.current[b];
        for (e, &r) in self.blocks[b][from..]
            .iter_mut()
            .zip(&dealt.values[b][from..])
        {
            let (row, col) = (e.row as usize * rank, e.col as usize * rank);
            let w = &self.w[row..row + rank];
            let h = &block.factors[col..col + rank];
            let prediction: f32 = w.iter().zip(h).map(|(a, b)| a * b).sum();
            e.residual = r - prediction;
        }
        dealt.current[b] = self.blocks[b].len();
    }
}

/// The block and column of item `i`.
fn place(partition: &MfPartition, i: u32) -> (usize, u32) {
    let i = i as usize;
    (partition.item_bucket[i] as usize, partition.item_local[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use petrel_ml::data::Ratings;

    #[test]
    fn a_moved_user_takes_its_ratings_and_gets_current_residuals_from_its_new_owner() {
        let ratings = Ratings {
            n_users: 4,
            n_items: 2,
            entries: vec![
                (0, 0, 2.0),
                (1, 1, 4.0),
                (2, 0, 3.0),
                (3, 1, 1.0),
                (3, 0, 5.0),
            ],
            id_mapping: None,
        };
        let partition = MfPartition::balanced(&ratings, 2);
        let mut blocks: Vec<FactorBlock> = (0..2)
            .map(|b| {
                let items = partition.bucket_items[b].clone();
                let h = vec![0.5; items.len()];
                FactorBlock::new(b, 1, items, h)
            })
            .collect();
        let worker = |index: usize| {
            let w_init = vec![2.0; partition.bucket_users[index].len()];
            let mut w =
                MfWorker::without_ratings(index, &partition, 1, w_init, &blocks, None).unwrap();
            w.keep_ratings().unwrap();
            for &(u, i, r) in &ratings.entries {
                w.add_rating(&partition, &blocks, u, i, r).unwrap();
            }
            w
        };
        let (mut from, mut to) = (worker(0), worker(1));
        assert!(from.keep_ratings().is_err(), "ratings were added already");
        let moved = from.release(|_| false, &partition).unwrap();
        assert_eq!(from.user_ids(), &[] as &[u32]);
        assert_eq!(from.squared_error().1, 0);
        let bad = MovedUser {
            w: vec![1.0, 2.0],
            ..moved[0].clone()
        };
        assert!(to.adopt(vec![bad], &partition).is_err());
        to.adopt(moved, &partition).unwrap();
        for block in &mut blocks {
            to.begin_visit(block);
        }
        // Every rating is now the new owner's, its residual r - 2 * 0.5.
        let expected: f64 = ratings
            .entries
            .iter()
            .map(|&(_, _, r)| f64::from(r - 1.0).powi(2))
            .sum();
        let (sum, n) = to.squared_error();
        assert_eq!(n, ratings.entries.len());
        assert!((sum - expected).abs() < 1e-9, "{sum} vs {expected}");
        let mut users = to.user_ids().to_vec();
        users.sort();
        assert_eq!(users, vec![0, 1, 2, 3]);
        // A worker of static dealing takes no deal.
        let w_init = vec![2.0; partition.bucket_users[0].len()];
        let mut fixed = MfWorker::new(0, &partition, &ratings, 1, w_init, &blocks).unwrap();
        assert!(fixed.release(|_| true, &partition).is_err());
    }
}
