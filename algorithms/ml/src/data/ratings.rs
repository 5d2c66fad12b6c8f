// Over 600 lines: both rating formats (triplets and MatrixMarket) share one reader and its limits.
//! Rating matrices: `user item rating` triplets (tab, space, comma or `::` separated, extra
//! columns such as MovieLens timestamps ignored) and MatrixMarket coordinate files.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::cache::{self, Cached, Decoder, Encoder};
use super::limits::SizeRule;
use super::text::{
    Blocks, Chunk, ChunkParser, LineCursor, ReaderBlocks, Start, each_line, parse_chunks,
    parse_f32, parse_lines, parse_uint, three_words, trim,
};
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

/// Original ids made dense in order of first appearance.
#[derive(Default)]
struct DenseIds {
    index: FxHashMap<String, u32>,
    numbers: NumberIndex,
    ids: Vec<String>,
}

impl DenseIds {
    fn get(&mut self, id: &str) -> u32 {
        if let Some(n) = numeric_id(id) {
            return self.number(n);
        }
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.ids.len() as u32;
        self.index.insert(id.to_owned(), i);
        self.ids.push(id.to_owned());
        i
    }

    fn number(&mut self, n: u32) -> u32 {
        let next = self.ids.len() as u32;
        let i = self.numbers.index(n, next);
        if i == next {
            self.ids.push(n.to_string());
        }
        i
    }

    /// The dense index of each of a chunk's ids.
    fn of_chunk(&mut self, local: &LocalIds) -> Vec<u32> {
        local
            .keys
            .iter()
            .map(|&key| match u32::try_from(key) {
                Ok(n) => self.number(n),
                Err(_) => self.get(local.text_id((key & u64::from(u32::MAX)) as usize)),
            })
            .collect()
    }
}

/// Parses `user item rating [ignored...]` lines separated by tabs, spaces or commas, ids
/// remapped to dense indices in order of first appearance. `#` and `%` start comments; a
/// first data line whose rating is not a number is a CSV header (MovieLens).
pub fn parse_triplets(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Ratings, MlError> {
    let name = name_for_errors.as_ref();
    triplets(&mut ReaderBlocks::new(reader, name), name)
}

/// Whether a ratings line (trimmed) holds no data.
fn is_comment(content: &str) -> bool {
    content.is_empty() || content.starts_with('#') || content.starts_with('%')
}

/// The triplets of `source`.
fn triplets(source: &mut dyn Blocks, name: &Path) -> Result<Ratings, MlError> {
    let (mut users, mut items) = (DenseIds::default(), DenseIds::default());
    let mut entries = Vec::new();
    // The first data line, which may be a header, is read on its own.
    let start = each_line(name, source, Start::default(), |line_no, line, _| {
        let content = line.trim();
        if is_comment(content) {
            return Ok(true);
        }
        let bad = |msg: String| MlError::malformed(name, line_no, msg);
        let (fields, n) = rating_fields(content, false);
        let Some(rating) = triplet_rating(&fields, n, bad)? else {
            return Ok(false);
        };
        entries.push((users.get(fields[0]), items.get(fields[1]), rating));
        Ok(false)
    })?;
    let parser = TripletParser { name };
    parse_chunks(&parser, name, source, start, |chunk, _| {
        if chunk.as_read {
            let dense = |&(u, i, r)| (users.number(u), items.number(i), r);
            entries.extend(chunk.entries.iter().map(dense));
            return Ok(());
        }
        let user_of = users.of_chunk(&chunk.users);
        let item_of = items.of_chunk(&chunk.items);
        entries.extend(
            chunk
                .entries
                .iter()
                .map(|&(u, i, r)| (user_of[u as usize], item_of[i as usize], r)),
        );
        Ok(())
    })?;
    Ok(Ratings {
        n_users: users.ids.len(),
        n_items: items.ids.len(),
        entries,
        id_mapping: Some(IdMapping {
            user_ids: users.ids,
            item_ids: items.ids,
        }),
    })
}

/// An id written as a canonical decimal below 2^32 ("17", not "017"): its number stands for
/// exactly that text.
fn numeric_id(id: &str) -> Option<u32> {
    let bytes = id.as_bytes();
    let canonical = !bytes.is_empty()
        && bytes.len() <= 10
        && (bytes.len() == 1 || bytes[0] != b'0')
        && bytes.iter().all(u8::is_ascii_digit);
    canonical.then(|| id.parse().ok()).flatten()
}

/// Ids of one chunk in order of first appearance: a number, or `1 << 32 | k` for text id `k`.
#[derive(Debug, Default)]
struct LocalIds {
    keys: Vec<u64>,
    text: String,
    ends: Vec<usize>,
}

impl LocalIds {
    /// The text of text id `k`.
    fn text_id(&self, k: usize) -> &str {
        let from = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.text[from..self.ends[k]]
    }
}

/// Ids below this are indexed through a table (4 bytes an id up to the largest seen), not
/// hashed: the common ids numbered from 0 or 1 cost one array access (at most 16 MiB).
const TABLE_IDS: usize = 1 << 22;

/// Dense indices of numeric ids: a table for the ids below its `limit`, a map above.
struct NumberIndex {
    table: Vec<u32>,
    map: FxHashMap<u32, u32>,
    limit: usize,
}

impl Default for NumberIndex {
    fn default() -> Self {
        NumberIndex::with_limit(TABLE_IDS)
    }
}

impl NumberIndex {
    /// No index in the table.
    const NONE: u32 = u32::MAX;

    /// Ids below `limit` (at most [`TABLE_IDS`]) go through the table.
    fn with_limit(limit: usize) -> Self {
        NumberIndex {
            table: Vec::new(),
            map: FxHashMap::default(),
            limit: limit.min(TABLE_IDS),
        }
    }

    /// The index of `id`; `next` when it has none yet, which it is then given.
    #[inline]
    fn index(&mut self, id: u32, next: u32) -> u32 {
        let at = id as usize;
        let slot = if at < self.limit {
            if at >= self.table.len() {
                let len = (at + 1).next_power_of_two().min(self.limit);
                self.table.resize(len, Self::NONE);
            }
            &mut self.table[at]
        } else {
            self.map.entry(id).or_insert(Self::NONE)
        };
        if *slot == Self::NONE {
            *slot = next;
        }
        *slot
    }
}

/// A chunk's maps from ids to local indices.
struct LocalMaps<'t> {
    numbers: NumberIndex,
    texts: FxHashMap<&'t str, u32>,
}

impl<'t> LocalMaps<'t> {
    /// The maps of a chunk of `bytes` bytes (its table covers ids below that count).
    fn for_chunk(bytes: usize) -> Self {
        LocalMaps {
            numbers: NumberIndex::with_limit(bytes.max(1 << 16)),
            texts: FxHashMap::default(),
        }
    }

    #[inline]
    fn index(&mut self, ids: &mut LocalIds, id: &'t str) -> u32 {
        if let Some(n) = numeric_id(id) {
            return self.number(ids, n);
        }
        let next = ids.keys.len() as u32;
        let index = *self.texts.entry(id).or_insert(next);
        if index == next {
            ids.keys.push(1 << 32 | ids.ends.len() as u64);
            ids.text.push_str(id);
            ids.ends.push(ids.text.len());
        }
        index
    }

    #[inline]
    fn number(&mut self, ids: &mut LocalIds, n: u32) -> u32 {
        let next = ids.keys.len() as u32;
        let index = self.numbers.index(n, next);
        if index == next {
            ids.keys.push(u64::from(n));
        }
        index
    }
}

/// One chunk's triplets with chunk-local dense ids, or with the numbers read when every
/// line was of the common form (`as_read`): made dense in file order as they are merged,
/// without a map of the chunk's own.
#[derive(Debug, Default)]
struct TripletChunk {
    entries: Vec<(u32, u32, f32)>,
    users: LocalIds,
    items: LocalIds,
    as_read: bool,
}

struct TripletParser<'a> {
    name: &'a Path,
}

impl ChunkParser for TripletParser<'_> {
    type Out = TripletChunk;
    // The merge makes every id dense in file order: it runs beside the parsing.
    const OVERLAP_DELIVERY: bool = true;

    fn parse(&self, text: &str, start: Start, chunk: &mut Chunk<TripletChunk>) {
        // The chunk's maps, made at its first line of another form.
        let mut maps: Option<[LocalMaps<'_>; 2]> = None;
        chunk.out.entries.reserve(text.len() / 12);
        // The entries from `raw` on still hold their ids as read: indexed in a pass of their
        // own, whose lookups (mostly cache misses) overlap instead of stalling each line.
        let mut raw = 0;
        let mut lines = LineCursor::new(text);
        while let Some(line) = lines.next_line(chunk) {
            if let Some(entry) = numeric_triplet(line) {
                chunk.out.entries.push(entry);
                continue;
            }
            let [users, items] =
                maps.get_or_insert_with(|| [(); 2].map(|_| LocalMaps::for_chunk(text.len())));
            index_numbers(users, items, &mut chunk.out, raw);
            let line_no = start.line + chunk.lines;
            let parsed = self.general(line, line_no, users, items, &mut chunk.out);
            raw = chunk.out.entries.len();
            if let Err(e) = parsed {
                chunk.error = Some(e);
                break;
            }
        }
        match &mut maps {
            Some([users, items]) => index_numbers(users, items, &mut chunk.out, raw),
            None => chunk.out.as_read = true,
        }
    }
}

impl TripletParser<'_> {
    /// A line [`numeric_triplet`] does not read (a comment, `::`, text ids, an error) into
    /// `out`, its ids indexed.
    fn general<'t>(
        &self,
        line: &'t str,
        line_no: usize,
        users: &mut LocalMaps<'t>,
        items: &mut LocalMaps<'t>,
        out: &mut TripletChunk,
    ) -> Result<(), MlError> {
        let ascii = line.is_ascii();
        let content = trim(line, ascii);
        if is_comment(content) {
            return Ok(());
        }
        let bad = |msg: String| MlError::malformed(self.name, line_no, msg);
        let (fields, n) = rating_fields(content, ascii);
        let Some(rating) = triplet_rating(&fields, n, bad)? else {
            return Err(bad(format!("rating {:?} is not a number", fields[2])));
        };
        let user = users.index(&mut out.users, fields[0]);
        let item = items.index(&mut out.items, fields[1]);
        out.entries.push((user, item, rating));
        Ok(())
    }
}

/// The rating of a triplet line's `n` fields; `None` if it is not a number (a header).
fn triplet_rating(
    fields: &[&str; 3],
    n: usize,
    bad: impl Fn(String) -> MlError,
) -> Result<Option<f32>, MlError> {
    if n < 3 {
        return Err(bad(format!(
            "expected `user item rating`, found {n} field(s)"
        )));
    }
    match parse_f32(fields[2]) {
        Some(r) if !r.is_finite() => Err(bad(format!("rating {:?} is not finite", fields[2]))),
        rating => Ok(rating),
    }
}

/// Replaces the ids as read of `out`'s entries from `from` on by their local indices.
fn index_numbers(
    users: &mut LocalMaps<'_>,
    items: &mut LocalMaps<'_>,
    out: &mut TripletChunk,
    from: usize,
) {
    let TripletChunk {
        entries,
        users: user_ids,
        items: item_ids,
        ..
    } = out;
    for entry in &mut entries[from..] {
        entry.0 = users.number(user_ids, entry.0);
        entry.1 = items.number(item_ids, entry.1);
    }
}

/// Whether `b` separates the fields of a triplet line (not `::`-separated).
#[inline]
fn is_separator(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | b',')
}

/// The common line, `user item rating [ignored...]` with [`numeric_id`] ids and a finite
/// rating, read in one pass: what the general path makes of it; `None` for anything else.
#[inline]
fn numeric_triplet(line: &str) -> Option<(u32, u32, f32)> {
    let bytes = line.as_bytes();
    let mut pos = 0;
    let user = leading_id(bytes, &mut pos)?;
    let item = leading_id(bytes, &mut pos)?;
    let from = pos;
    while pos < bytes.len() && !is_separator(bytes[pos]) {
        // A rating with a `:` may be part of a `::`: left to the general path.
        if bytes[pos] == b':' {
            return None;
        }
        pos += 1;
    }
    // Ids and separators hold no `:`, so a `::` could only be in the ignored columns.
    if pos == from || (pos < bytes.len() && has_double_colon(&bytes[pos..])) {
        return None;
    }
    // `from` and `pos` are next to ASCII bytes (or the ends), so on char boundaries.
    let rating = parse_f32(&line[from..pos])?;
    rating.is_finite().then_some((user, item, rating))
}

/// The canonical decimal id below 2^32 at `*pos` and the separators after it (at least
/// one), moving `*pos` past them.
#[inline]
fn leading_id(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let from = *pos;
    let mut at = from;
    let mut value = 0u64;
    // At most 11 digits are read: 10 is the longest canonical id, and 11 fit in a u64.
    while at < bytes.len() && at - from < 11 && bytes[at].is_ascii_digit() {
        value = value * 10 + u64::from(bytes[at] - b'0');
        at += 1;
    }
    let digits = at - from;
    let canonical = (1..=10).contains(&digits) && (digits == 1 || bytes[from] != b'0');
    if !canonical
        || value > u64::from(u32::MAX)
        || !bytes.get(at).copied().is_some_and(is_separator)
    {
        return None;
    }
    while at < bytes.len() && is_separator(bytes[at]) {
        at += 1;
    }
    *pos = at;
    Some(value as u32)
}

/// Whether `text` holds `::`.
fn has_double_colon(text: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b':', &text[from..]) {
        if text.get(from + i + 1) == Some(&b':') {
            return true;
        }
        from += i + 1;
    }
    false
}

/// The first three fields of a ratings line and how many it has: `::`-separated
/// (MovieLens 1M `ratings.dat`) when the line has `::`, else separated by tabs, spaces or
/// commas.
fn rating_fields(content: &str, ascii: bool) -> ([&str; 3], usize) {
    let mut fields = [""; 3];
    let mut n = 0;
    let mut put = |field| {
        if n < 3 {
            fields[n] = field;
        }
        n += 1;
    };
    if has_double_colon(content.as_bytes()) {
        content.split("::").for_each(|f| put(trim(f, ascii)));
    } else {
        let bytes = content.as_bytes();
        let mut from = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if is_separator(b) {
                if i > from {
                    put(&content[from..i]);
                }
                from = i + 1;
            }
        }
        if bytes.len() > from {
            put(&content[from..]);
        }
    }
    (fields, n)
}

/// Parses a MatrixMarket file under the [`DataLimits::from_env`] limits; see
/// [`parse_matrix_market_with_limits`].
pub fn parse_matrix_market(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Ratings, MlError> {
    parse_matrix_market_with_limits(reader, name_for_errors, &DataLimits::from_env()?)
}

/// Parses a MatrixMarket `matrix coordinate (real|integer) general` file into 0-based
/// entries, checking indices against the size line, the entry count against its nnz, and
/// the row and column counts against `limits.max_dimension` and the text's size
/// ([`super::limits::size_bound`]). Entries are never reserved by nnz.
pub fn parse_matrix_market_with_limits(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
    limits: &DataLimits,
) -> Result<Ratings, MlError> {
    let name = name_for_errors.as_ref();
    let mut source = ReaderBlocks::new(reader, name);
    matrix_market_ratings(&mut source, name, limits, SizeRule::new(None)?)
}

/// The matrix of a MatrixMarket input, its dimensions checked against `size`.
fn matrix_market_ratings(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
) -> Result<Ratings, MlError> {
    let mut entries = Vec::new();
    let (n_users, n_items) = matrix_market(source, name, limits, Some(size), |e| {
        entries.extend_from_slice(e)
    })?;
    Ok(Ratings {
        entries,
        ..numbered(n_users, n_items)
    })
}

/// A MatrixMarket matrix's shape without entries: its ids are the file's own 1-based row
/// and column numbers, as a user reads them.
fn numbered(n_users: usize, n_items: usize) -> Ratings {
    let ids = |n: usize| (1..=n).map(|i| i.to_string()).collect();
    Ratings {
        n_users,
        n_items,
        entries: Vec::new(),
        id_mapping: Some(IdMapping {
            user_ids: ids(n_users),
            item_ids: ids(n_items),
        }),
    }
}

/// [`parse_matrix_market_with_limits`] handing the entries to `sink` a chunk at a time;
/// returns the row and column counts, checked against `size_rule` if given (when read if
/// the input's size is known, else at the end).
fn matrix_market(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size_rule: Option<SizeRule>,
    mut sink: impl FnMut(&[(u32, u32, f32)]),
) -> Result<(usize, usize), MlError> {
    let mut size: Option<(usize, usize, usize)> = None;
    let mut size_line = 0;
    let start = each_line(name, source, Start::default(), |line_no, line, bytes| {
        let bad = |msg: String| MlError::malformed(name, line_no, msg);
        if line_no == 1 {
            let header = line.to_ascii_lowercase();
            let mut words = header.split_whitespace();
            let ok = words
                .by_ref()
                .take(3)
                .eq(["%%matrixmarket", "matrix", "coordinate"])
                && matches!(words.next(), Some("real" | "integer"))
                && words.eq(["general"]);
            if !ok {
                return Err(bad(format!(
                    "expected `%%MatrixMarket matrix coordinate real general`, found {line:?}"
                )));
            }
            return Ok(true);
        }
        let content = line.trim();
        if content.is_empty() || content.starts_with('%') {
            return Ok(true);
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        if fields.len() != 3 {
            return Err(bad("size line must be `rows cols nnz`".into()));
        }
        let rows = mm_index(fields[0], "row count", bad)?;
        let cols = mm_index(fields[1], "column count", bad)?;
        let nnz = mm_index(fields[2], "entry count", bad)?;
        if rows > u32::MAX as usize || cols > u32::MAX as usize {
            return Err(bad("dimensions exceed u32".into()));
        }
        limits.check_dimension(name, line_no, "row count", rows as u64)?;
        limits.check_dimension(name, line_no, "column count", cols as u64)?;
        if let Some(rule) = size_rule.filter(SizeRule::is_known) {
            rule.check(name, line_no, "row count", rows as u64, bytes)?;
            rule.check(name, line_no, "column count", cols as u64, bytes)?;
        }
        size = Some((rows, cols, nnz));
        size_line = line_no;
        Ok(false)
    })?;
    let Some((n_users, n_items, nnz)) = size else {
        return Err(MlError::malformed(name, start.line, "missing size line"));
    };
    let parser = MatrixMarketParser {
        name,
        rows: n_users,
        cols: n_items,
        nnz: nnz as u64,
    };
    let end = parse_chunks(&parser, name, source, start, |entries, _| {
        sink(&entries);
        Ok(())
    })?;
    if end.entries != nnz as u64 {
        let found = format!("declared {nnz} entries, found {}", end.entries);
        return Err(MlError::malformed(name, end.line, found));
    }
    if let Some(rule) = size_rule.filter(|r| !r.is_known()) {
        rule.check(name, size_line, "row count", n_users as u64, end.bytes)?;
        rule.check(name, size_line, "column count", n_items as u64, end.bytes)?;
    }
    Ok((n_users, n_items))
}

/// A MatrixMarket index or count.
#[inline]
fn mm_index(text: &str, what: &str, bad: impl Fn(String) -> MlError) -> Result<usize, MlError> {
    parse_uint::<usize>(text)
        .ok_or_else(|| bad(format!("{what} {text:?} is not a non-negative integer")))
}

/// The entry lines of a MatrixMarket file.
struct MatrixMarketParser<'a> {
    name: &'a Path,
    rows: usize,
    cols: usize,
    nnz: u64,
}

impl ChunkParser for MatrixMarketParser<'_> {
    type Out = Vec<(u32, u32, f32)>;

    fn parse(&self, text: &str, start: Start, chunk: &mut Chunk<Self::Out>) {
        parse_lines(text, chunk, |line, ascii, chunk| {
            self.entry(line, ascii, start, chunk)
        });
    }

    fn holds(&self, chunk: &Chunk<Self::Out>, start: &Start) -> bool {
        start.entries + chunk.entries <= self.nnz
    }
}

impl MatrixMarketParser<'_> {
    fn entry(
        &self,
        line: &str,
        ascii: bool,
        start: Start,
        chunk: &mut Chunk<Vec<(u32, u32, f32)>>,
    ) -> Result<(), MlError> {
        let content = trim(line, ascii);
        if content.is_empty() || content.starts_with('%') {
            return Ok(());
        }
        let bad = |msg: String| MlError::malformed(self.name, start.line + chunk.lines, msg);
        let Some(fields) = three_words(content, ascii) else {
            return Err(bad("entry must be `row col value`".into()));
        };
        let row = mm_index(fields[0], "row", bad)?;
        let col = mm_index(fields[1], "column", bad)?;
        let (rows, cols) = (self.rows, self.cols);
        if row == 0 || row > rows || col == 0 || col > cols {
            return Err(bad(format!(
                "entry ({row}, {col}) outside 1..={rows} x 1..={cols}"
            )));
        }
        let value = parse_f32(fields[2])
            .ok_or_else(|| bad(format!("value {:?} is not a number", fields[2])))?;
        if !value.is_finite() {
            return Err(bad(format!("value {:?} is not finite", fields[2])));
        }
        let nnz = self.nnz;
        if start.entries + chunk.entries == nnz {
            return Err(bad(format!("more entries than the declared {nnz}")));
        }
        chunk.entries += 1;
        chunk.out.push(((row - 1) as u32, (col - 1) as u32, value));
        Ok(())
    }
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
