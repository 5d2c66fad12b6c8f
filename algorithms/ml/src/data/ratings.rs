//! Rating matrices: `user item rating` triplets (tab, space, comma or `::` separated, extra
//! columns such as MovieLens timestamps ignored) and MatrixMarket coordinate files.

mod matrix_market;
mod triplets;

use matrix_market::{matrix_market, matrix_market_ratings, numbered};
pub use matrix_market::{parse_matrix_market, parse_matrix_market_with_limits};
pub use triplets::parse_triplets;
use triplets::{is_comment, rating_fields, triplets};

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::cache::{self, Cached, Decoder, Encoder};
use super::limits::SizeRule;
use super::text::{Blocks, ReaderBlocks, Start, each_line, parse_f32};
use super::{DataLimits, MlError};

/// Original ids of the dense 0-based indices (as text: ids need not be numbers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdMapping {
    /// The original id of each dense user index.
    pub user_ids: Vec<String>,
    /// The original id of each dense item index.
    pub item_ids: Vec<String>,
}

/// A sparse rating matrix with dense 0-based user and item indices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratings {
    /// Number of users (user indices are below it).
    pub n_users: usize,
    /// Number of items (item indices are below it).
    pub n_items: usize,
    /// `(user, item, rating)`.
    pub entries: Vec<(u32, u32, f32)>,
    /// The ids as the file wrote them: triplet ids (remapped to dense indices) or
    /// MatrixMarket's 1-based row and column numbers; `None` for synthetic data.
    pub id_mapping: Option<IdMapping>,
}

impl Ratings {
    /// Splits the entries into (train, test) by [`HeldOutMask`]; both keep the entry order,
    /// dimensions and mapping.
    pub fn train_test_split(
        &self,
        test_fraction: f64,
        seed: u64,
    ) -> Result<(Ratings, Ratings), MlError> {
        self.clone().into_train_test_split(test_fraction, seed)
    }

    /// [`Ratings::train_test_split`] by value, without a second copy of the whole set.
    pub fn into_train_test_split(
        mut self,
        test_fraction: f64,
        seed: u64,
    ) -> Result<(Ratings, Ratings), MlError> {
        let mask = HeldOutMask::new(self.entries.len(), test_fraction, seed)?;
        let mut test = Vec::with_capacity(mask.n_test());
        let mut k = 0;
        self.entries.retain(|e| {
            let held_out = mask.is_test(k);
            k += 1;
            if held_out {
                test.push(*e);
            }
            !held_out
        });
        self.entries.shrink_to_fit();
        let test = Ratings {
            entries: test,
            ..self.clone_shape()
        };
        Ok((self, test))
    }

    /// The ratings of the file at `path` (ids as this matrix's file wrote them; 0-based for
    /// synthetic data) in this matrix's index space, and how many pairs had an unknown id.
    pub fn held_out_from(&self, path: &Path) -> Result<(Ratings, usize), MlError> {
        let index = |ids: Option<&Vec<String>>, n: usize| -> HashMap<String, u32> {
            match ids {
                Some(ids) => ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (id.clone(), i as u32))
                    .collect(),
                None => (0..n as u32).map(|i| (i.to_string(), i)).collect(),
            }
        };
        let users = index(self.id_mapping.as_ref().map(|m| &m.user_ids), self.n_users);
        let items = index(self.id_mapping.as_ref().map(|m| &m.item_ids), self.n_items);
        let mut entries = Vec::new();
        let mut left_out = 0;
        for (n, (user, item, rating)) in load_labelled_ratings(path)?.into_iter().enumerate() {
            let Some(rating) = rating else {
                return Err(MlError::InvalidParameter(format!(
                    "{}: pair {} ({user}, {item}) has no rating",
                    path.display(),
                    n + 1
                )));
            };
            match (users.get(&user), items.get(&item)) {
                (Some(&u), Some(&i)) => entries.push((u, i, rating)),
                _ => left_out += 1,
            }
        }
        let held_out = Ratings {
            entries,
            ..self.clone_shape()
        };
        Ok((held_out, left_out))
    }

    /// The dimensions and mapping without the entries.
    fn clone_shape(&self) -> Ratings {
        Ratings {
            n_users: self.n_users,
            n_items: self.n_items,
            entries: Vec::new(),
            id_mapping: self.id_mapping.clone(),
        }
    }

    /// Number of ratings per user (index = user).
    pub fn user_counts(&self) -> Vec<usize> {
        self.counts(self.n_users, |e| e.0)
    }

    /// Number of ratings per item (index = item).
    pub fn item_counts(&self) -> Vec<usize> {
        self.counts(self.n_items, |e| e.1)
    }

    fn counts(&self, n: usize, id: impl Fn(&(u32, u32, f32)) -> u32) -> Vec<usize> {
        let mut counts = vec![0; n];
        self.entries
            .iter()
            .for_each(|e| counts[id(e) as usize] += 1);
        counts
    }
}

/// Which of `len` entries [`Ratings::train_test_split`] holds out: the
/// `round(test_fraction * len)` indices a seeded shuffle of `0..len` puts first, one bit per
/// entry. It depends only on `len`, `test_fraction` and `seed`, so a node that streams the
/// ratings splits them as one that holds them all. Shuffling `u32` indices draws what a
/// `usize` shuffle draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldOutMask {
    words: Vec<u64>,
    len: usize,
    n_test: usize,
}

impl HeldOutMask {
    /// The mask of `len` entries; refuses a `test_fraction` outside `[0, 1]`.
    pub fn new(len: usize, test_fraction: f64, seed: u64) -> Result<Self, MlError> {
        if !(0.0..=1.0).contains(&test_fraction) {
            return Err(MlError::InvalidParameter(format!(
                "test_fraction {test_fraction} is outside [0, 1]"
            )));
        }
        let n_test = ((test_fraction * len as f64).round() as usize).min(len);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut words = vec![0u64; len.div_ceil(64)];
        let mut mark = |i: usize| words[i / 64] |= 1 << (i % 64);
        match u32::try_from(len) {
            Ok(n) => {
                let mut held_out = |order: &[u32]| {
                    order[..n_test].iter().for_each(|&i| mark(i as usize));
                };
                if !shuffle_in_own_mapping(n, &mut rng, &mut held_out) {
                    let mut order: Vec<u32> = (0..n).collect();
                    order.shuffle(&mut rng);
                    held_out(&order);
                }
            }
            Err(_) => {
                let mut order: Vec<usize> = (0..len).collect();
                order.shuffle(&mut rng);
                order[..n_test].iter().for_each(|&i| mark(i));
            }
        }
        Ok(HeldOutMask { words, len, n_test })
    }

    /// Whether entry `k` (0-based, in the order the ratings are read) is held out; false
    /// past the end.
    pub fn is_test(&self, k: usize) -> bool {
        k < self.len && self.words[k / 64] & (1 << (k % 64)) != 0
    }

    /// Entries held out.
    pub fn n_test(&self) -> usize {
        self.n_test
    }
}

/// Shuffles `0..n` in an anonymous mapping of its own, hands the result to `take`, and
/// unmaps it; `false` (nothing drawn from `rng`) when no mapping could be made. A heap
/// buffer this large would stay resident after it is freed (`petrel::keep_large_buffers`).
fn shuffle_in_own_mapping(n: u32, rng: &mut StdRng, take: impl FnOnce(&[u32])) -> bool {
    let bytes = (n as usize).max(1) * std::mem::size_of::<u32>();
    let Ok(mut map) = memmap2::MmapMut::map_anon(bytes) else {
        return false;
    };
    let Ok(all) = bytemuck::try_cast_slice_mut::<u8, u32>(&mut map[..]) else {
        return false;
    };
    let order = &mut all[..n as usize];
    order.iter_mut().zip(0..n).for_each(|(slot, i)| *slot = i);
    order.shuffle(rng);
    take(order);
    true
}

/// A ratings file as parsed (shared in a process and kept in the binary cache).
#[derive(Debug, Clone, Default, PartialEq)]
struct RatingsFile {
    ratings: Ratings,
    /// Whether it was a MatrixMarket file (whose dimensions the limits check).
    matrix_market: bool,
}

/// Ids as one text and where each ends.
fn encode_ids(out: &mut Encoder, ids: &[String]) {
    let mut ends = Vec::with_capacity(ids.len());
    let mut text = Vec::new();
    for id in ids {
        text.extend_from_slice(id.as_bytes());
        ends.push(text.len() as u64);
    }
    out.array(&text);
    out.array(&ends);
}

fn decode_ids(input: &mut Decoder<'_>) -> Option<Vec<String>> {
    let text: Vec<u8> = input.array()?;
    let ends: Vec<u64> = input.array()?;
    let mut from = 0usize;
    ends.iter()
        .map(|&end| {
            let end = usize::try_from(end).ok()?;
            let id = std::str::from_utf8(text.get(from..end)?).ok()?.to_owned();
            from = end;
            Some(id)
        })
        .collect()
}

impl Cached for RatingsFile {
    const KIND: u32 = 2;
    fn fits(&self, limits: &DataLimits, size: &SizeRule, name: &Path) -> bool {
        if !self.matrix_market {
            return true;
        }
        [self.ratings.n_users, self.ratings.n_items]
            .into_iter()
            .all(|n| {
                n as u64 <= limits.max_dimension
                    && size.check(name, 0, "row count", n as u64, 0).is_ok()
            })
    }

    fn encode(&self, out: &mut Encoder) {
        let r = &self.ratings;
        out.u64(u64::from(self.matrix_market));
        out.u64(r.n_users as u64);
        out.u64(r.n_items as u64);
        out.array(&r.entries.iter().map(|e| e.0).collect::<Vec<_>>());
        out.array(&r.entries.iter().map(|e| e.1).collect::<Vec<_>>());
        out.array(&r.entries.iter().map(|e| e.2).collect::<Vec<_>>());
        if !self.matrix_market {
            let mapping = r.id_mapping.clone().unwrap_or_default();
            encode_ids(out, &mapping.user_ids);
            encode_ids(out, &mapping.item_ids);
        }
    }

    fn decode(input: &mut Decoder<'_>) -> Option<Self> {
        let matrix_market = input.u64()? == 1;
        let n_users = usize::try_from(input.u64()?).ok()?;
        let n_items = usize::try_from(input.u64()?).ok()?;
        let users: Vec<u32> = input.array()?;
        let items: Vec<u32> = input.array()?;
        let values: Vec<f32> = input.array()?;
        let in_range = users.len() == items.len()
            && users.len() == values.len()
            && users.iter().all(|&u| (u as usize) < n_users)
            && items.iter().all(|&i| (i as usize) < n_items);
        if !in_range {
            return None;
        }
        let entries = (0..users.len())
            .map(|k| (users[k], items[k], values[k]))
            .collect();
        let ratings = if matrix_market {
            Ratings {
                entries,
                ..numbered(n_users, n_items)
            }
        } else {
            let user_ids = decode_ids(input)?;
            let item_ids = decode_ids(input)?;
            if user_ids.len() != n_users || item_ids.len() != n_items {
                return None;
            }
            Ratings {
                n_users,
                n_items,
                entries,
                id_mapping: Some(IdMapping { user_ids, item_ids }),
            }
        };
        Some(RatingsFile {
            ratings,
            matrix_market,
        })
    }
}

/// Loads a ratings file, choosing MatrixMarket when the first line starts with
/// `%%MatrixMarket` and triplets otherwise.
pub fn load_ratings(path: impl AsRef<Path>) -> Result<Ratings, MlError> {
    let shared = load_shared(path.as_ref())?;
    Ok(Arc::try_unwrap(shared).map_or_else(|s| s.ratings.clone(), |s| s.ratings))
}

/// The ratings of `path` as the process shares them (see [`super::cache`]).
fn load_shared(path: &Path) -> Result<Arc<RatingsFile>, MlError> {
    // Read whole: a read error comes before any parse error.
    cache::load_file(path, "ratings", true, |source, limits, size| {
        let matrix_market = is_matrix_market(source)?;
        let ratings = if matrix_market {
            matrix_market_ratings(source, path, limits, size)?
        } else {
            triplets(source, path)?
        };
        Ok(RatingsFile {
            ratings,
            matrix_market,
        })
    })
}

/// Whether `source` starts with `%%MatrixMarket` (nothing is consumed).
fn is_matrix_market(source: &mut dyn Blocks) -> Result<bool, MlError> {
    // The first block holds the whole first line: put back once looked at.
    let (n, matrix_market) =
        (source.next_block()?).map_or((0, false), |b| (b.len(), b.starts_with(b"%%MatrixMarket")));
    source.give_back(n);
    Ok(matrix_market)
}

/// [`load_ratings`] handing each `(user, item, rating)` to `visit` in file order, after every
/// check passed; returns the matrix without entries (dimensions and id mapping).
pub fn scan_ratings(
    path: impl AsRef<Path>,
    mut visit: impl FnMut(u32, u32, f32),
) -> Result<Ratings, MlError> {
    let shared = load_shared(path.as_ref())?;
    for &(u, i, r) in &shared.ratings.entries {
        visit(u, i, r);
    }
    Ok(shared.ratings.clone_shape())
}

/// Reads `(user, item, rating)` with the ids as written (a saved model's ids): triplets, the
/// rating optional (pairs to predict), or MatrixMarket (1-based row and column numbers).
pub fn load_labelled_ratings(
    path: impl AsRef<Path>,
) -> Result<Vec<crate::model::LabelledRating>, MlError> {
    let path = path.as_ref();
    let mut source = ReaderBlocks::new(super::open_buffered(path)?, path);
    if is_matrix_market(&mut source)? {
        // Only the entries' ids are kept: the declared dimensions size nothing.
        let limits = DataLimits::from_env()?;
        let mut out = Vec::new();
        matrix_market(&mut source, path, &limits, None, |entries| {
            out.extend(
                entries
                    .iter()
                    .map(|&(u, i, v)| ((u + 1).to_string(), (i + 1).to_string(), Some(v))),
            );
        })?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut first = true;
    each_line(path, &mut source, Start::default(), |line_no, line, _| {
        let content = line.trim();
        if is_comment(content) {
            return Ok(true);
        }
        let first_data_line = std::mem::take(&mut first);
        let bad = |msg: String| MlError::malformed(path, line_no, msg);
        let (fields, n) = rating_fields(content, false);
        if n < 2 || fields[0].is_empty() || fields[1].is_empty() {
            return Err(bad("expected `user item [rating]`".into()));
        }
        let rating = match (n > 2).then_some(fields[2]) {
            None => None,
            Some(text) => match parse_f32(text) {
                Some(r) if r.is_finite() => Some(r),
                Some(_) => return Err(bad(format!("rating {text:?} is not finite"))),
                None if first_data_line => return Ok(true),
                None => return Err(bad(format!("rating {text:?} is not a number"))),
            },
        };
        out.push((fields[0].to_string(), fields[1].to_string(), rating));
        Ok(true)
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests;
