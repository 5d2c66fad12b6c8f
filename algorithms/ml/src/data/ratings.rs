//! Rating matrices: `user item rating` triplets (tab, space, comma or `::` separated, extra
//! columns such as MovieLens timestamps ignored) and MatrixMarket coordinate files.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::limits::SizeRule;
use super::{DataError, DataLimits, numbered_lines, open_sized};

/// Original ids of the dense 0-based indices: `user_ids[u]` is the id user `u` had in the
/// file. Ids are kept as text so that non-numeric ids (e.g. Amazon's) work too.
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
    /// Splits the entries into (train, test) with `round(test_fraction * len)` test entries
    /// chosen by a seeded shuffle ([`HeldOutMask`]); both keep the original entry order,
    /// dimensions and mapping.
    pub fn train_test_split(
        &self,
        test_fraction: f64,
        seed: u64,
    ) -> Result<(Ratings, Ratings), DataError> {
        let mask = HeldOutMask::new(self.entries.len(), test_fraction, seed)?;
        let pick = |want_test: bool| Ratings {
            n_users: self.n_users,
            n_items: self.n_items,
            entries: self
                .entries
                .iter()
                .enumerate()
                .filter(|&(k, _)| mask.is_test(k) == want_test)
                .map(|(_, e)| *e)
                .collect(),
            id_mapping: self.id_mapping.clone(),
        };
        Ok((pick(false), pick(true)))
    }

    /// [`Ratings::train_test_split`] by value: the training entries stay in this matrix's
    /// vector (no second copy of the whole set), the test entries are moved out.
    pub fn into_train_test_split(
        mut self,
        test_fraction: f64,
        seed: u64,
    ) -> Result<(Ratings, Ratings), DataError> {
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
            n_users: self.n_users,
            n_items: self.n_items,
            entries: test,
            id_mapping: self.id_mapping.clone(),
        };
        Ok((self, test))
    }

    /// The ratings of the file at `path` (ids as this matrix's file wrote them; 0-based
    /// indices for synthetic data) in this matrix's index space, leaving out pairs whose
    /// user or item this matrix has no index for; returns them and how many were left out.
    pub fn held_out_from(&self, path: &Path) -> Result<(Ratings, usize), DataError> {
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
                return Err(DataError::InvalidParameter(format!(
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
        Ok((
            Ratings {
                n_users: self.n_users,
                n_items: self.n_items,
                entries,
                id_mapping: self.id_mapping.clone(),
            },
            left_out,
        ))
    }

    /// Number of ratings per user (index = user).
    pub fn user_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.n_users];
        for &(u, _, _) in &self.entries {
            counts[u as usize] += 1;
        }
        counts
    }

    /// Number of ratings per item (index = item).
    pub fn item_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.n_items];
        for &(_, i, _) in &self.entries {
            counts[i as usize] += 1;
        }
        counts
    }
}

/// Which of `len` entries [`Ratings::train_test_split`] holds out: the
/// `round(test_fraction * len)` indices a seeded shuffle of `0..len` puts first, kept as one
/// bit per entry. It depends only on `len`, `test_fraction` and `seed`, so a node that
/// streams the ratings (counting them in a first pass) splits them as a node that holds
/// them all. The shuffle runs over `u32` indices (4 bytes per entry while it runs, then 1
/// bit): `shuffle` draws one `gen_range` per position whatever the element type, so the
/// permutation is the one of a `usize` shuffle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldOutMask {
    words: Vec<u64>,
    len: usize,
    n_test: usize,
}

impl HeldOutMask {
    /// The mask of `len` entries; refuses a `test_fraction` outside `[0, 1]`.
    pub fn new(len: usize, test_fraction: f64, seed: u64) -> Result<Self, DataError> {
        if !(0.0..=1.0).contains(&test_fraction) {
            return Err(DataError::InvalidParameter(format!(
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

    /// Entries the mask covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it covers no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries held out.
    pub fn n_test(&self) -> usize {
        self.n_test
    }
}

/// Shuffles `0..n` in an anonymous mapping of its own, hands the result to `take`, and
/// unmaps it; `false` (nothing drawn from `rng`) when no mapping could be made. A heap
/// buffer of this size would stay resident after it is freed with the binary's allocator
/// settings (`petrel::keep_large_buffers`), even through `malloc_trim`: the index of 16M
/// ratings (61 MiB) stayed beside everything an MF worker loaded after it.
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

/// Loads a ratings file, choosing MatrixMarket when the first line starts with
/// `%%MatrixMarket` and triplets otherwise.
pub fn load_ratings(path: impl AsRef<Path>) -> Result<Ratings, DataError> {
    collected(|visit| scan_ratings(path, visit))
}

/// `path` opened, whether it is a MatrixMarket file (by its first bytes), and its size
/// when it is a regular file.
fn open_ratings(path: &Path) -> Result<(impl BufRead + use<>, bool, Option<u64>), DataError> {
    let (mut reader, bytes) = open_sized(path)?;
    let buf = reader.fill_buf().map_err(|e| DataError::io(path, e))?;
    let is_matrix_market = buf.starts_with(b"%%MatrixMarket");
    Ok((reader, is_matrix_market, bytes))
}

/// [`load_ratings`] without holding the entries: hands each `(user, item, rating)` to
/// `visit` in file order, as it is read, and returns the matrix without entries (its
/// dimensions and id mapping). The same checks and errors as [`load_ratings`]; a caller
/// that reads the file again gets the same indices in the same order. A MatrixMarket
/// file's row and column counts, which size the factor matrices, are checked against the
/// file's size (at most 2^20 + 16 x its bytes, [`super::limits::size_bound`]) before any
/// entry is visited.
pub fn scan_ratings(
    path: impl AsRef<Path>,
    mut visit: impl FnMut(u32, u32, f32),
) -> Result<Ratings, DataError> {
    let path = path.as_ref();
    let (reader, is_matrix_market, bytes) = open_ratings(path)?;
    if is_matrix_market {
        let limits = DataLimits::from_env()?;
        let size = Some(SizeRule::new(bytes)?);
        let (n_users, n_items) = scan_matrix_market(reader, path, &limits, size, &mut visit)?;
        Ok(numbered(n_users, n_items))
    } else {
        scan_triplets(reader, path, &mut visit)
    }
}

/// Collects what a `scan_*` function visits into the returned matrix.
fn collected(
    scan: impl FnOnce(&mut dyn FnMut(u32, u32, f32)) -> Result<Ratings, DataError>,
) -> Result<Ratings, DataError> {
    let mut entries = Vec::new();
    let mut ratings = scan(&mut |user, item, rating| entries.push((user, item, rating)))?;
    ratings.entries = entries;
    Ok(ratings)
}

fn dense_id(map: &mut HashMap<String, u32>, ids: &mut Vec<String>, id: &str) -> u32 {
    if let Some(&index) = map.get(id) {
        return index;
    }
    let index = ids.len() as u32;
    map.insert(id.to_owned(), index);
    ids.push(id.to_owned());
    index
}

/// Parses `user item rating [ignored...]` lines separated by tabs, spaces or commas. Ids are
/// remapped to dense indices in order of first appearance. Lines starting with `#` or `%`
/// are comments; a first data line whose rating is not a number is taken as a CSV header
/// (MovieLens `ratings.csv`).
pub fn parse_triplets(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Ratings, DataError> {
    let name = name_for_errors.as_ref();
    collected(|visit| scan_triplets(reader, name, visit))
}

/// [`parse_triplets`] handing the entries to `visit` (the returned matrix has none).
fn scan_triplets(
    reader: impl BufRead,
    name: &Path,
    visit: &mut dyn FnMut(u32, u32, f32),
) -> Result<Ratings, DataError> {
    let mut users = HashMap::new();
    let mut items = HashMap::new();
    let mut mapping = IdMapping::default();
    rating_lines(reader, name, |line_no, fields, first_data_line| {
        let bad = |msg: String| DataError::malformed(name, line_no, msg);
        if fields.len() < 3 {
            return Err(bad(format!(
                "expected `user item rating`, found {} field(s)",
                fields.len()
            )));
        }
        let rating: f32 = match fields[2].parse() {
            Ok(r) => r,
            Err(_) if first_data_line => return Ok(()),
            Err(_) => return Err(bad(format!("rating {:?} is not a number", fields[2]))),
        };
        if !rating.is_finite() {
            return Err(bad(format!("rating {:?} is not finite", fields[2])));
        }
        let user = dense_id(&mut users, &mut mapping.user_ids, fields[0]);
        let item = dense_id(&mut items, &mut mapping.item_ids, fields[1]);
        visit(user, item, rating);
        Ok(())
    })?;
    Ok(Ratings {
        n_users: mapping.user_ids.len(),
        n_items: mapping.item_ids.len(),
        entries: Vec::new(),
        id_mapping: Some(mapping),
    })
}

/// Parses a MatrixMarket file under the [`DataLimits::from_env`] limits; see
/// [`parse_matrix_market_with_limits`].
pub fn parse_matrix_market(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Ratings, DataError> {
    parse_matrix_market_with_limits(reader, name_for_errors, &DataLimits::from_env()?)
}

/// Parses a MatrixMarket `matrix coordinate (real|integer) general` file into 0-based
/// entries, checking indices against the size line, the entry count against its nnz, and
/// the row and column counts (which size the factor matrices) against
/// `limits.max_dimension` and against what the text's size allows (2^20 + 16 x its bytes,
/// [`super::limits::size_bound`]; checked once the text has been read, before anything is
/// sized by them). Entries are stored as they are read, never reserved by nnz.
pub fn parse_matrix_market_with_limits(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
    limits: &DataLimits,
) -> Result<Ratings, DataError> {
    let name = name_for_errors.as_ref();
    let size = Some(SizeRule::new(None)?);
    let mut entries = Vec::new();
    let (n_users, n_items) = scan_matrix_market(reader, name, limits, size, &mut |u, i, r| {
        entries.push((u, i, r));
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

/// [`parse_matrix_market_with_limits`] handing the entries to `visit`; returns the row and
/// column counts. With `size`, they are checked against it: as soon as they are read when
/// the input's size is known, else once it has all been read (nothing here is sized by
/// them, and `visit` is only handed entries inside them). Without, they are not (a caller
/// that keeps only the entries' ids allocates nothing by them).
fn scan_matrix_market(
    reader: impl BufRead,
    name: &Path,
    limits: &DataLimits,
    size_rule: Option<SizeRule>,
    visit: &mut dyn FnMut(u32, u32, f32),
) -> Result<(usize, usize), DataError> {
    let mut size: Option<(usize, usize, usize)> = None;
    let mut size_line = 0;
    let mut read = 0usize;
    let mut bytes = 0u64;
    let mut last_line = 0;
    for item in numbered_lines(reader, name) {
        let (line_no, line) = item?;
        last_line = line_no;
        bytes += line.len() as u64 + 1;
        let bad = |msg: String| DataError::malformed(name, line_no, msg);
        if line_no == 1 {
            let header: Vec<String> = line
                .split_whitespace()
                .map(|t| t.to_ascii_lowercase())
                .collect();
            let ok = header.len() == 5
                && header[0] == "%%matrixmarket"
                && header[1] == "matrix"
                && header[2] == "coordinate"
                && (header[3] == "real" || header[3] == "integer")
                && header[4] == "general";
            if !ok {
                return Err(bad(format!(
                    "expected `%%MatrixMarket matrix coordinate real general`, found {line:?}"
                )));
            }
            continue;
        }
        let content = line.trim();
        if content.is_empty() || content.starts_with('%') {
            continue;
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        let parse_index = |text: &str, what: &str| -> Result<usize, DataError> {
            text.parse::<usize>()
                .map_err(|_| bad(format!("{what} {text:?} is not a non-negative integer")))
        };
        match size {
            None => {
                if fields.len() != 3 {
                    return Err(bad("size line must be `rows cols nnz`".into()));
                }
                let rows = parse_index(fields[0], "row count")?;
                let cols = parse_index(fields[1], "column count")?;
                let nnz = parse_index(fields[2], "entry count")?;
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
            }
            Some((rows, cols, nnz)) => {
                if fields.len() != 3 {
                    return Err(bad("entry must be `row col value`".into()));
                }
                let row = parse_index(fields[0], "row")?;
                let col = parse_index(fields[1], "column")?;
                if row == 0 || row > rows || col == 0 || col > cols {
                    return Err(bad(format!(
                        "entry ({row}, {col}) outside 1..={rows} x 1..={cols}"
                    )));
                }
                let value: f32 = fields[2]
                    .parse()
                    .map_err(|_| bad(format!("value {:?} is not a number", fields[2])))?;
                if !value.is_finite() {
                    return Err(bad(format!("value {:?} is not finite", fields[2])));
                }
                if read == nnz {
                    return Err(bad(format!("more entries than the declared {nnz}")));
                }
                read += 1;
                visit((row - 1) as u32, (col - 1) as u32, value);
            }
        }
    }
    let Some((n_users, n_items, nnz)) = size else {
        return Err(DataError::malformed(name, last_line, "missing size line"));
    };
    if read != nnz {
        return Err(DataError::malformed(
            name,
            last_line,
            format!("declared {nnz} entries, found {read}"),
        ));
    }
    if let Some(rule) = size_rule.filter(|r| !r.is_known()) {
        rule.check(name, size_line, "row count", n_users as u64, bytes)?;
        rule.check(name, size_line, "column count", n_items as u64, bytes)?;
    }
    Ok((n_users, n_items))
}

/// The fields of a ratings line: `::`-separated (MovieLens 1M `ratings.dat`) when the
/// line has `::`, else separated by tabs, spaces or commas.
fn rating_fields(content: &str) -> Vec<&str> {
    if content.contains("::") {
        content.split("::").map(str::trim).collect()
    } else {
        content
            .split(['\t', ' ', ','])
            .filter(|f| !f.is_empty())
            .collect()
    }
}

/// Reads `(user, item, rating)` with the ids as written in the file (what a saved model's
/// ids are): triplets in any separator [`parse_triplets`] accepts, the rating optional
/// (`user item` pairs to predict), or a MatrixMarket file (1-based row and column
/// numbers). Errors name the file and line.
pub fn load_labelled_ratings(
    path: impl AsRef<Path>,
) -> Result<Vec<crate::model::LabelledRating>, DataError> {
    let path = path.as_ref();
    let (reader, is_matrix_market, _) = open_ratings(path)?;
    if is_matrix_market {
        // Only the entries' own ids are kept, so the declared dimensions size nothing: a
        // small test file of a large matrix is read whatever they are.
        let limits = DataLimits::from_env()?;
        let mut out = Vec::new();
        scan_matrix_market(reader, path, &limits, None, &mut |u, i, v| {
            out.push(((u + 1).to_string(), (i + 1).to_string(), Some(v)));
        })?;
        return Ok(out);
    }
    let mut out = Vec::new();
    rating_lines(reader, path, |line_no, fields, first_data_line| {
        let bad = |msg: String| DataError::malformed(path, line_no, msg);
        if fields.len() < 2 || fields[0].is_empty() || fields[1].is_empty() {
            return Err(bad("expected `user item [rating]`".into()));
        }
        let rating = match fields.get(2) {
            None => None,
            Some(text) => match text.parse::<f32>() {
                Ok(r) if r.is_finite() => Some(r),
                Ok(_) => return Err(bad(format!("rating {text:?} is not finite"))),
                Err(_) if first_data_line => return Ok(()),
                Err(_) => return Err(bad(format!("rating {text:?} is not a number"))),
            },
        };
        out.push((fields[0].to_string(), fields[1].to_string(), rating));
        Ok(())
    })?;
    Ok(out)
}

/// Hands each data line of a ratings text to `each` as `(line number, fields, whether it
/// is the first data line)`; blank lines and `#`/`%` comments are skipped.
fn rating_lines(
    reader: impl BufRead,
    name: &Path,
    mut each: impl FnMut(usize, &[&str], bool) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut first = true;
    for item in numbered_lines(reader, name) {
        let (line_no, line) = item?;
        let content = line.trim();
        if content.is_empty() || content.starts_with('#') || content.starts_with('%') {
            continue;
        }
        each(line_no, &rating_fields(content), std::mem::take(&mut first))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
