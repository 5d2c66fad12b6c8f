//! Slicing: every plan layer (one parameter tensor) cut into slices, each with the shard
//! that owns it and the [`Priority`] it travels at.
//!
//! # Priorities
//! In [`Mode::P3`] a slice of layer `l` (0-based, forward order) of a model with `L` layers
//! has `priority = L - l`: layer 0 gets `L`, the last layer gets 1, and a *higher* value is
//! sent first. In [`Mode::Fifo`] and [`Mode::Sequential`] every layer is one slice (or one
//! part per shard, [`SlicePlan::layerwise_split`]) and all priorities are 0, so a
//! [`PriorityQueue`](petrel_messages::PriorityQueue) degenerates to FIFO: gradients go out in the order backprop
//! produces them (last layer first).

use petrel_messages::Priority;

use crate::core::error::P3CoreError;
use crate::core::mode::Mode;

/// The shard that owns slice `id` while `shards` (ascending) serve the job: round-robin
/// over them, as [`SlicePlan::new`] assigns over `0..n_shards`, so every node derives the
/// same owners from the same shard list. Shard 0 never leaves, so it keeps slice 0.
pub fn owner(id: usize, shards: &[usize]) -> usize {
    shards.get(id % shards.len().max(1)).copied().unwrap_or(0)
}

/// A contiguous piece of one layer's flat parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slice {
    /// Index in [`SlicePlan::slices`].
    pub id: usize,
    /// Plan layer (parameter tensor) the slice belongs to.
    pub layer: usize,
    /// First parameter of the slice within its layer.
    pub offset: u64,
    /// Number of parameters (>= 1).
    pub len: u64,
    /// Server shard owning the slice.
    pub shard: usize,
    /// Higher is sent first (see the module docs for the formula); the wire's
    /// [`Priority`], so it goes on the message unchanged.
    pub priority: Priority,
}

/// Every layer cut into slices, with shard and priority.
#[derive(Debug, Clone, PartialEq)]
pub struct SlicePlan {
    n_shards: usize,
    slices: Vec<Slice>,
    /// Range of slice ids of each layer.
    layer_ranges: Vec<std::ops::Range<usize>>,
}

impl SlicePlan {
    /// P3 plan: layer `l` (of `counts[l]` parameters) cut into slices of at most `slice_size`
    /// parameters (the last one may be shorter), assigned to shards round-robin in layer
    /// order across layer boundaries (so small layers do not all land on shard 0).
    pub fn new(counts: &[u64], slice_size: u64, n_shards: usize) -> Result<Self, P3CoreError> {
        Self::with_mode(Mode::P3, counts, slice_size, n_shards)
    }

    /// Plan for any mode. For `Fifo` and `Sequential`, `slice_size` is ignored: each layer
    /// is a single slice with priority 0. Layers with 0 parameters get no slices.
    pub fn with_mode(
        mode: Mode,
        counts: &[u64],
        slice_size: u64,
        n_shards: usize,
    ) -> Result<Self, P3CoreError> {
        let n_layers = counts.len();
        Self::build(mode, counts, slice_size, n_shards, |layer, count| {
            let (size, priority) = match mode {
                Mode::P3 => (slice_size, Self::p3_priority(n_layers, layer)),
                Mode::Fifo | Mode::Sequential => (count.max(1), Priority(0)),
            };
            let lens = (0..count)
                .step_by(size as usize)
                .map(|o| size.min(count - o));
            (priority, lens.collect())
        })
    }

    /// Like [`SlicePlan::with_mode`], but for `Fifo` and `Sequential` every layer is cut into
    /// `n_shards` nearly equal parts on consecutive shards (fewer for layers with fewer parameters
    /// than shards), all at priority 0, as MXNet's kvstore partitions big arrays over its servers.
    /// The layer is still the scheduling unit (its parts are sent together), but no single shard
    /// becomes the hot spot for a huge layer. `P3` plans are the same as [`SlicePlan::new`].
    pub fn layerwise_split(
        mode: Mode,
        counts: &[u64],
        slice_size: u64,
        n_shards: usize,
    ) -> Result<Self, P3CoreError> {
        if mode == Mode::P3 {
            return Self::new(counts, slice_size, n_shards);
        }
        Self::build(mode, counts, slice_size, n_shards, |_, count| {
            let parts = (n_shards as u64).min(count);
            // Even split: the first `count % parts` parts get one extra parameter.
            let lens = (0..parts).map(|p| count / parts + u64::from(p < count % parts));
            (Priority(0), lens.collect())
        })
    }

    /// The plan whose layer `l` is cut into the slice lengths `cut(l, count)` gives, at
    /// its priority, slice `id` on shard `id % n_shards` (round-robin across layers, so
    /// small layers do not all land on shard 0).
    fn build(
        mode: Mode,
        counts: &[u64],
        slice_size: u64,
        n_shards: usize,
        cut: impl Fn(usize, u64) -> (Priority, Vec<u64>),
    ) -> Result<Self, P3CoreError> {
        if n_shards == 0 {
            return Err(P3CoreError::ZeroShards);
        }
        if mode == Mode::P3 && slice_size == 0 {
            return Err(P3CoreError::ZeroSliceSize);
        }
        let mut slices = Vec::new();
        let mut layer_ranges = Vec::with_capacity(counts.len());
        for (layer, &count) in counts.iter().enumerate() {
            let start = slices.len();
            let (priority, lens) = cut(layer, count);
            let mut offset = 0;
            for len in lens {
                let id = slices.len();
                slices.push(Slice {
                    id,
                    layer,
                    offset,
                    len,
                    shard: id % n_shards,
                    priority,
                });
                offset += len;
            }
            layer_ranges.push(start..slices.len());
        }
        Ok(SlicePlan {
            n_shards,
            slices,
            layer_ranges,
        })
    }

    /// `n_layers - layer` (saturating at 0 and at `i32::MAX`; layer 0 has the highest
    /// priority, the last layer 1, so every P3 slice outranks [`Priority::NORMAL`]).
    pub fn p3_priority(n_layers: usize, layer: usize) -> Priority {
        Priority(n_layers.saturating_sub(layer).min(i32::MAX as usize) as i32)
    }

    /// Number of server shards the slices are spread over.
    pub fn n_shards(&self) -> usize {
        self.n_shards
    }
    /// Number of plan layers (parameter tensors), including empty ones.
    pub fn n_layers(&self) -> usize {
        self.layer_ranges.len()
    }
    /// Every slice, in id order (layer order, then offset order).
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }
    /// The slice with this id.
    pub fn slice(&self, id: usize) -> Option<&Slice> {
        self.slices.get(id)
    }
    /// Number of slices of each layer (what [`crate::core::LayerReadiness`] waits for).
    pub fn slices_per_layer(&self) -> Vec<usize> {
        self.layer_ranges.iter().map(|r| r.len()).collect()
    }

    /// Slices of one layer in offset order (empty for an unknown layer).
    pub fn layer_slices(&self, layer: usize) -> &[Slice] {
        self.layer_ranges
            .get(layer)
            .map(|r| &self.slices[r.clone()])
            .unwrap_or(&[])
    }

    /// Slices owned by `shard`.
    pub fn shard_slices(&self, shard: usize) -> impl Iterator<Item = &Slice> {
        self.slices.iter().filter(move |s| s.shard == shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(plan: &SlicePlan) -> Vec<(usize, u64, u64, usize, i32)> {
        plan.slices()
            .iter()
            .map(|s| (s.layer, s.offset, s.len, s.shard, s.priority.0))
            .collect()
    }

    #[test]
    fn slicing_offsets_shards_priorities() {
        let plan = SlicePlan::new(&[5, 0, 7, 3], 3, 2).unwrap();
        assert_eq!(
            rows(&plan),
            vec![
                (0, 0, 3, 0, 4),
                (0, 3, 2, 1, 4),
                (2, 0, 3, 0, 2),
                (2, 3, 3, 1, 2),
                (2, 6, 1, 0, 2),
                (3, 0, 3, 1, 1),
            ]
        );
        assert!(plan.layer_slices(1).is_empty());
        assert!(plan.layer_slices(9).is_empty());
        let owned = |shard| plan.shard_slices(shard).map(|s| s.len).sum::<u64>();
        assert_eq!((owned(0), owned(1)), (7, 8));
        assert_eq!(plan.shard_slices(1).count(), 3);
        assert_eq!(plan.slices_per_layer(), vec![2, 0, 3, 1]);
        for (i, s) in plan.slices().iter().enumerate() {
            assert_eq!(s.id, i);
        }
        assert!(matches!(
            SlicePlan::new(&[1], 0, 1),
            Err(P3CoreError::ZeroSliceSize)
        ));
        assert!(matches!(
            SlicePlan::new(&[1], 1, 0),
            Err(P3CoreError::ZeroShards)
        ));
    }

    #[test]
    fn owners_follow_the_shard_list() {
        assert_eq!(owner(4, &[0, 2, 3]), 2);
        assert_eq!(owner(3, &[0, 2, 3]), 0);
        assert_eq!(owner(0, &[0, 5]), 0);
        assert_eq!(owner(7, &[]), 0);
    }

    #[test]
    fn fifo_plan_is_whole_layers_equal_priority() {
        let plan = SlicePlan::with_mode(Mode::Fifo, &[5, 7, 0], 2, 3).unwrap();
        assert_eq!(rows(&plan), vec![(0, 0, 5, 0, 0), (1, 0, 7, 1, 0)]);
    }

    #[test]
    fn layerwise_split_spreads_layers_over_shards() {
        let plan = SlicePlan::layerwise_split(Mode::Fifo, &[10, 1, 5], 0, 2).unwrap();
        let l0 = plan.layer_slices(0);
        assert_eq!(l0.len(), 2);
        assert_eq!((l0[0].len, l0[1].len), (5, 5));
        assert_ne!(l0[0].shard, l0[1].shard);
        assert_eq!(plan.layer_slices(1).len(), 1);
        let l2 = plan.layer_slices(2);
        assert_eq!((l2[0].len, l2[1].len, l2[1].offset), (3, 2, 3));
        assert!(plan.slices().iter().all(|s| s.priority == Priority(0)));
        assert_eq!(plan.slices().iter().map(|s| s.len).sum::<u64>(), 16);
    }

    #[test]
    fn p3_priorities_outrank_normal_traffic_and_saturate() {
        assert_eq!(SlicePlan::p3_priority(3, 0), Priority(3));
        assert_eq!(SlicePlan::p3_priority(3, 2), Priority(1));
        assert!(SlicePlan::p3_priority(3, 2) > Priority::NORMAL);
        assert_eq!(SlicePlan::p3_priority(3, 5), Priority(0));
        assert_eq!(SlicePlan::p3_priority(usize::MAX, 0), Priority(i32::MAX));
    }

    proptest::proptest! {
        /// Slices tile every layer exactly, respect the size limit, and shards are
        /// assigned round-robin over the global slice order.
        #[test]
        fn slices_tile_layers(
            counts in proptest::collection::vec(0u64..200, 1..8),
            size in 1u64..50,
            shards in 1usize..5,
        ) {
            let plan = SlicePlan::new(&counts, size, shards).unwrap();
            for (l, &c) in counts.iter().enumerate() {
                let mut next = 0;
                for s in plan.layer_slices(l) {
                    proptest::prop_assert_eq!(s.offset, next);
                    proptest::prop_assert!(s.len >= 1 && s.len <= size);
                    proptest::prop_assert_eq!(s.priority.0 as usize, counts.len() - l);
                    next += s.len;
                }
                proptest::prop_assert_eq!(next, c);
            }
            let all: Vec<usize> = (0..shards).collect();
            for s in plan.slices() {
                proptest::prop_assert_eq!(s.shard, s.id % shards);
                proptest::prop_assert_eq!(owner(s.id, &all), s.shard);
            }
        }
    }
}
