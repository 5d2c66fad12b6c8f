//! The one priority queue of petrel: highest [`Priority`] first, FIFO within a priority.
//!
//! The actor mailbox (`petrel_actors::PriorityInbox`), the transport's outbox and P3's slice
//! queue all order work this way, so they share this type: one ordering rule, tested once.
//! Plain data, no I/O.

use crate::Priority;
use std::collections::BinaryHeap;

/// Max-heap by priority, FIFO (by insertion order) within a priority.
#[derive(Debug)]
pub struct PriorityQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    priority: Priority,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.priority == o.priority && self.seq == o.seq
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

impl<T> Default for PriorityQueue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> PriorityQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `item`; it leaves after every item of higher priority and every earlier item
    /// of the same priority.
    pub fn push(&mut self, priority: Priority, item: T) {
        self.seq += 1;
        self.heap.push(Entry {
            priority,
            seq: self.seq,
            item,
        });
    }

    /// Removes the next item: the highest priority, the oldest within it.
    pub fn pop(&mut self) -> Option<(Priority, T)> {
        self.heap.pop().map(|e| (e.priority, e.item))
    }

    /// The next item without removing it.
    pub fn peek(&self) -> Option<(Priority, &T)> {
        self.heap.peek().map(|e| (e.priority, &e.item))
    }

    /// Keeps only the items for which `keep` returns true; order is preserved.
    pub fn retain(&mut self, mut keep: impl FnMut(Priority, &T) -> bool) {
        self.heap.retain(|e| keep(e.priority, &e.item));
    }

    /// Iterates over the queued items in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Priority, &T)> {
        self.heap.iter().map(|e| (e.priority, &e.item))
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_leaves_first_and_equal_priorities_keep_insertion_order() {
        let mut q = PriorityQueue::new();
        q.push(Priority(0), "a");
        q.push(Priority(5), "b");
        q.push(Priority(0), "c");
        q.push(Priority(5), "d");
        q.push(Priority(-3), "e");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, x)| x)).collect();
        assert_eq!(order, ["b", "d", "a", "c", "e"]);
    }

    #[test]
    fn retain_drops_items_and_keeps_the_order_of_the_rest() {
        let mut q = PriorityQueue::new();
        for i in 0..6 {
            q.push(Priority(i % 2), i);
        }
        q.retain(|_, &i| i != 3);
        assert_eq!(q.peek(), Some((Priority(1), &1)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, x)| x)).collect();
        assert_eq!(order, [1, 5, 0, 2, 4]);
    }
}
