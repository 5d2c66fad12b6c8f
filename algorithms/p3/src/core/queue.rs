//! The slice queue: what a link (or a worker's uplink) sends next. It is the workspace's
//! one [`PriorityQueue`] (highest [`Priority`] first, FIFO within a priority), so P3 orders
//! slices exactly as the outbox and the priority mailbox order messages.

use petrel_messages::{Priority, PriorityQueue};

use crate::core::slicing::Slice;

/// Max-priority queue of slices (or of anything a runtime queues per slice, such as a
/// slice id or a slice with its bytes), FIFO among equal priorities.
pub struct SliceQueue<T = Slice> {
    queue: PriorityQueue<T>,
}

impl<T> Default for SliceQueue<T> {
    fn default() -> Self {
        SliceQueue {
            queue: PriorityQueue::new(),
        }
    }
}

impl<T> std::fmt::Debug for SliceQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceQueue")
            .field("len", &self.queue.len())
            .finish()
    }
}

impl<T> SliceQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `item` behind everything of higher or equal priority already queued.
    pub fn push(&mut self, priority: Priority, item: T) {
        self.queue.push(priority, item);
    }

    /// Highest priority first; among equals, the earliest pushed.
    pub fn pop(&mut self) -> Option<T> {
        self.queue.pop().map(|(_, item)| item)
    }

    /// Like [`SliceQueue::pop`], with the item's priority.
    pub fn pop_with_priority(&mut self) -> Option<(Priority, T)> {
        self.queue.pop()
    }

    /// The next item, without removing it.
    pub fn peek(&self) -> Option<&T> {
        self.queue.peek().map(|(_, item)| item)
    }

    /// The priority of the next item.
    pub fn peek_priority(&self) -> Option<Priority> {
        self.queue.peek().map(|(p, _)| p)
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

impl SliceQueue<Slice> {
    /// Queues a slice at its own priority.
    pub fn push_slice(&mut self, slice: Slice) {
        self.push(slice.priority, slice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::slicing::SlicePlan;

    proptest::proptest! {
        /// Pops come out by descending priority, FIFO among equal priorities.
        #[test]
        fn queue_order(prios in proptest::collection::vec(0i32..4, 0..40)) {
            let mut q = SliceQueue::new();
            for (i, &p) in prios.iter().enumerate() {
                q.push(Priority(p), i);
            }
            let mut expected: Vec<(Priority, usize)> =
                prios.iter().map(|&p| Priority(p)).zip(0..).collect();
            expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut got = Vec::new();
            while let Some(x) = q.pop_with_priority() {
                got.push(x);
            }
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn queue_interleaves_new_high_priority_items() {
        let plan = SlicePlan::new(&[2, 4], 2, 1).unwrap();
        let mut q = SliceQueue::new();
        // last layer's gradients first (as backprop produces them) ...
        for s in plan.layer_slices(1) {
            q.push_slice(*s);
        }
        assert_eq!(q.pop().map(|s| (s.layer, s.offset)), Some((1, 0)));
        // ... then layer 0 arrives and overtakes at the next slice boundary
        for s in plan.layer_slices(0) {
            q.push_slice(*s);
        }
        assert_eq!(q.peek_priority(), Some(Priority(2)));
        assert_eq!(q.peek().map(|s| s.layer), Some(0));
        assert_eq!(q.len(), 2);
        let order: Vec<(usize, u64)> = std::iter::from_fn(|| q.pop())
            .map(|s| (s.layer, s.offset))
            .collect();
        assert_eq!(order, vec![(0, 0), (1, 2)]);
        assert!(q.is_empty());
    }
}
