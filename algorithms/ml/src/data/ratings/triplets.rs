//! `user item rating` triplets: separators, a CSV header, and ids made dense in order of
//! first appearance, parsed a chunk at a time.

use super::{IdMapping, Ratings};
use crate::data::MlError;
use crate::data::text::{
    Blocks, Chunk, ChunkParser, LineCursor, ReaderBlocks, Start, each_line, parse_chunks,
    parse_f32, trim,
};
use rustc_hash::FxHashMap;
use std::io::BufRead;
use std::path::Path;

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
pub(super) fn is_comment(content: &str) -> bool {
    content.is_empty() || content.starts_with('#') || content.starts_with('%')
}

/// The triplets of `source`.
pub(super) fn triplets(source: &mut dyn Blocks, name: &Path) -> Result<Ratings, MlError> {
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
pub(super) fn numeric_id(id: &str) -> Option<u32> {
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
pub(super) const TABLE_IDS: usize = 1 << 22;

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
pub(super) fn numeric_triplet(line: &str) -> Option<(u32, u32, f32)> {
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
pub(super) fn rating_fields(content: &str, ascii: bool) -> ([&str; 3], usize) {
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
