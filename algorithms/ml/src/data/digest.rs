//! An order-sensitive digest of what one pass over a data source read, for loaders that
//! read a source several times (to hold only a share of it) and must refuse a source that
//! changed between the passes instead of training on a mix of two versions.

use rustc_hash::FxHasher;
use std::hash::Hasher;

/// How many words a pass read and their running FxHash. Each step `h -> (rotl(h) ^ w) * K`
/// is a bijection of the state for a fixed word, so two passes that differ in a single
/// word always end with different digests; several changes could cancel only by chance.
/// Not a defence against someone crafting a file, only against one that moved.
#[derive(Clone, Default)]
pub struct ReadDigest {
    words: u64,
    hash: FxHasher,
}

impl std::fmt::Debug for ReadDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (words, hash) = self.finish();
        write!(f, "ReadDigest({words} words, {hash:#018x})")
    }
}

impl ReadDigest {
    /// Adds one word read.
    pub fn add(&mut self, word: u64) {
        self.words += 1;
        self.hash.write_u64(word);
    }

    /// Adds a rating (or any index pair and value), exactly as read.
    pub fn add_triplet(&mut self, row: u32, column: u32, value: f32) {
        self.add(u64::from(row) << 32 | u64::from(column));
        self.add(u64::from(value.to_bits()));
    }

    /// The words added and their hash: equal for two passes that read the same.
    pub fn finish(&self) -> (u64, u64) {
        (self.words, self.hash.finish())
    }

    /// [`Self::finish`] folded into one word (what nodes compare with each other).
    pub fn value(&self) -> u64 {
        let mut hash = self.hash.clone();
        hash.write_u64(self.words);
        hash.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ReadDigest;

    fn digest(triplets: &[(u32, u32, f32)]) -> (u64, u64) {
        let mut d = ReadDigest::default();
        for &(u, i, r) in triplets {
            d.add_triplet(u, i, r);
        }
        d.finish()
    }

    #[test]
    fn any_single_change_order_or_length_shows() {
        let read = [(0, 1, 4.0), (2, 3, 5.0), (4, 0, 1.5)];
        assert_eq!(digest(&read), digest(&read));
        let mut changes = Vec::new();
        for k in 0..read.len() {
            let mut value = read;
            value[k].2 += 0.5;
            let mut user = read;
            user[k].0 += 1;
            let mut item = read;
            item[k].1 ^= 1 << 20;
            changes.extend([value, user, item]);
        }
        let swapped = [read[1], read[0], read[2]];
        for changed in changes.iter().chain([&swapped]) {
            assert_ne!(digest(changed), digest(&read), "{changed:?}");
        }
        assert_ne!(digest(&read[..2]), digest(&read));
        // -0.0 and 0.0 are different reads.
        assert_ne!(digest(&[(0, 0, -0.0)]), digest(&[(0, 0, 0.0)]));
    }
}
