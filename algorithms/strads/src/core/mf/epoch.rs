//! A change of the MF workers re-forms the ring: the scheduler gathers W and the H blocks
//! at a rotation boundary, then deals the users and splits the items over the workers of
//! the moment exactly as a run starts, from the current factors. [`epoch_partition`] is
//! that split: user ranges from the dealer ([`crate::core::balance::RowDealer::reshape`])
//! over the users' deal order, items balanced by rating counts over as many blocks as
//! workers.

use super::MfPartition;
use petrel_ml::topic::balanced_buckets;
use std::ops::Range;

/// The partition of a new ring of `ranges.len()` workers: user `u` goes to the worker
/// whose range holds its position `order[u]` (a leaver's empty range gets none), items
/// are balanced by `item_counts` over as many blocks as workers.
pub fn epoch_partition(order: &[u32], ranges: &[Range<u64>], item_counts: &[usize]) -> MfPartition {
    let workers = ranges.len().max(1);
    let user_bucket = order
        .iter()
        .map(|&p| {
            let p = u64::from(p);
            ranges.iter().position(|r| r.contains(&p)).unwrap_or(0) as u32
        })
        .collect();
    MfPartition::from_buckets(user_bucket, balanced_buckets(item_counts, workers), workers)
}

impl MfPartition {
    /// The partition of given user and item buckets (`n_buckets` of each).
    pub fn from_buckets(user_bucket: Vec<u32>, item_bucket: Vec<u32>, n_buckets: usize) -> Self {
        let n_buckets = n_buckets.max(1);
        let locate = |bucket_of: &[u32]| {
            let mut members = vec![Vec::new(); n_buckets];
            let mut local = vec![0u32; bucket_of.len()];
            for (id, &b) in bucket_of.iter().enumerate() {
                let b = (b as usize).min(n_buckets - 1);
                local[id] = members[b].len() as u32;
                members[b].push(id as u32);
            }
            (local, members)
        };
        let (user_local, bucket_users) = locate(&user_bucket);
        let (item_local, bucket_items) = locate(&item_bucket);
        MfPartition {
            n_buckets,
            user_bucket,
            user_local,
            item_bucket,
            item_local,
            bucket_users,
            bucket_items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::balance::deal_order;

    #[test]
    fn users_follow_the_dealt_ranges_and_items_split_into_one_block_per_worker() {
        // Six users statically in two buckets; their deal order sorts them by bucket.
        let owner = [0, 1, 0, 1, 0, 1];
        let order = deal_order(&owner);
        let items = [5, 1, 1, 5, 2, 2, 3];
        // Three workers after a join: two users each.
        let p = epoch_partition(&order, &[0..2, 2..4, 4..6], &items);
        assert_eq!(p.n_buckets, 3);
        assert_eq!(p.user_bucket, vec![0, 1, 0, 2, 1, 2]);
        assert_eq!(p.bucket_users, vec![vec![0, 2], vec![1, 4], vec![3, 5]]);
        assert_eq!(p.user_local, vec![0, 0, 1, 0, 1, 1]);
        assert_eq!(p.bucket_items.len(), 3);
        assert!(p.bucket_items.iter().all(|b| !b.is_empty()));
        let mut all: Vec<u32> = p.bucket_items.concat();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<u32>>());
        // The same split again: every node computes the same partition.
        assert_eq!(epoch_partition(&order, &[0..2, 2..4, 4..6], &items), p);
    }

    #[test]
    fn a_leaver_s_empty_range_gets_no_user() {
        let order = deal_order(&[0, 0, 1, 1, 2, 2]);
        // Worker 0 left: the two staying workers take three users each.
        let p = epoch_partition(&order, &[0..3, 3..6], &[1, 1, 1, 1]);
        assert_eq!(p.n_buckets, 2);
        assert_eq!(p.bucket_users, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(p.bucket_items.iter().map(Vec::len).sum::<usize>(), 4);
    }
}
