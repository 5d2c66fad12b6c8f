//! The one priority queue of petrel: highest [`Priority`] first, FIFO within a priority,
//! shared by the actor mailbox, the transport's outbox and P3's slice queue.
//!
//! Each item holds a [`Rank`] (priority and place in line) that stays comparable when
//! moved between queues with [`PriorityQueue::pop_ranked`] and
//! [`PriorityQueue::push_ranked`]: the outbox parks a peer's messages aside that way
//! without losing their turn.

use crate::Priority;
use std::collections::BinaryHeap;

/// Max-heap by priority, FIFO (by insertion order) within a priority.
#[derive(Debug)]
pub struct PriorityQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
}

/// An item's place in a [`PriorityQueue`]: a greater rank (higher priority, or older at
/// the same priority) leaves first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rank {
    /// The item's priority.
    pub priority: Priority,
    seq: u64,
}

impl Ord for Rank {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug)]
struct Entry<T> {
    rank: Rank,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.rank == o.rank
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
        self.rank.cmp(&o.rank)
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

    /// Queues `item` after every item of higher priority and every earlier one of its own.
    pub fn push(&mut self, priority: Priority, item: T) {
        self.seq += 1;
        self.heap.push(Entry {
            rank: Rank {
                priority,
                seq: self.seq,
            },
            item,
        });
    }

    /// Removes the next item: the highest priority, the oldest within it.
    pub fn pop(&mut self) -> Option<(Priority, T)> {
        self.heap.pop().map(|e| (e.rank.priority, e.item))
    }

    /// The next item without removing it.
    pub fn peek(&self) -> Option<(Priority, &T)> {
        self.heap.peek().map(|e| (e.rank.priority, &e.item))
    }

    /// Removes the next item with its [`Rank`], to [`push_ranked`](Self::push_ranked) elsewhere.
    pub fn pop_ranked(&mut self) -> Option<(Rank, T)> {
        self.heap.pop().map(|e| (e.rank, e.item))
    }

    /// The next item and its [`Rank`], without removing it.
    pub fn peek_ranked(&self) -> Option<(Rank, &T)> {
        self.heap.peek().map(|e| (e.rank, &e.item))
    }

    /// Queues an item keeping the rank it had in the queue it came from.
    pub fn push_ranked(&mut self, rank: Rank, item: T) {
        self.seq = self.seq.max(rank.seq);
        self.heap.push(Entry { rank, item });
    }

    /// Keeps only the items for which `keep` returns true; order is preserved.
    pub fn retain(&mut self, mut keep: impl FnMut(Priority, &T) -> bool) {
        self.heap.retain(|e| keep(e.rank.priority, &e.item));
    }

    /// Iterates over the queued items in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Priority, &T)> {
        self.heap.iter().map(|e| (e.rank.priority, &e.item))
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

    #[test]
    fn a_ranked_item_moved_to_another_queue_keeps_its_turn() {
        let mut main = PriorityQueue::new();
        main.push(Priority(1), "old");
        main.push(Priority(1), "young");
        let (old_rank, old) = main.pop_ranked().unwrap();
        let mut parked = PriorityQueue::new();
        parked.push_ranked(old_rank, old);
        let (young_rank, _) = main.peek_ranked().unwrap();
        assert!(old_rank > young_rank, "the older item still goes first");
        parked.push(Priority(1), "later");
        assert_eq!(parked.pop(), Some((Priority(1), "old")));
        assert_eq!(parked.pop(), Some((Priority(1), "later")));
        main.push(Priority(2), "urgent");
        assert!(
            main.peek_ranked().unwrap().0 > old_rank,
            "priority beats age"
        );
    }
}
