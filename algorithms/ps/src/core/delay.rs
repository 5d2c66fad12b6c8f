//! A shard-side delay injector: each update is held back until `delay` later updates have
//! arrived, so a gradient is applied `delay` updates after the read it was computed from
//! (the delay of McMahan & Streeter's analysis, counted in updates, not in clocks).

use std::collections::VecDeque;

/// A FIFO that releases each item once `delay` later items have been pushed.
#[derive(Debug, Clone)]
pub struct UpdateDelay<T> {
    delay: usize,
    held: VecDeque<T>,
}

impl<T> UpdateDelay<T> {
    /// Holds each item back for `delay` later items (0: every item is due at once).
    pub fn new(delay: usize) -> Self {
        UpdateDelay {
            delay,
            held: VecDeque::with_capacity(delay.min(1 << 16) + 1),
        }
    }

    /// Queues `item`; returns the item now due (the one `delay` items older), if any.
    pub fn push(&mut self, item: T) -> Option<T> {
        self.held.push_back(item);
        if self.held.len() > self.delay {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// Items held back.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held back.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_each_item_after_delay_later_ones() {
        let mut d = UpdateDelay::new(2);
        assert_eq!(d.push(1), None);
        assert_eq!(d.push(2), None);
        assert_eq!(d.len(), 2);
        assert_eq!(d.push(3), Some(1));
        assert_eq!(d.push(4), Some(2));
        let mut now = UpdateDelay::new(0);
        assert_eq!(now.push(7), Some(7));
        assert!(now.is_empty());
    }
}
