// Over 600 lines: the LIBSVM reader's parse, limits, sharing and errors are one format's contract.
//! LIBSVM / SVMlight sparse format: `label idx:val idx:val ...` with 1-based, strictly
//! increasing feature indices. Stored 0-based in memory.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::cache::{self, Cached, Decoder, Encoder, FileKey};
use super::limits::SizeRule;
use super::text::{
    Blocks, Chunk, ChunkParser, ReaderBlocks, Start, parse_chunks, parse_f32, parse_lines,
    parse_uint, words,
};
use super::{DataLimits, MlError};

/// One sparse example: 0-based feature indices (strictly increasing) and their values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseRow {
    /// Feature indices, 0-based, strictly increasing.
    pub indices: Vec<u32>,
    /// The value of each listed feature.
    pub values: Vec<f32>,
}

impl SparseRow {
    /// Dot product with a dense vector; indices past `dense.len()` count as zero.
    pub fn dot(&self, dense: &[f32]) -> f64 {
        self.indices
            .iter()
            .zip(&self.values)
            .filter_map(|(&j, &v)| dense.get(j as usize).map(|&d| f64::from(v) * f64::from(d)))
            .sum()
    }

    /// Makes this row a copy of `indices` and `values` (keeping its buffers).
    fn set(&mut self, indices: &[u32], values: &[f32]) {
        self.indices.clear();
        self.indices.extend_from_slice(indices);
        self.values.clear();
        self.values.extend_from_slice(values);
    }
}

/// Row-major sparse dataset with one label per row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseDataset {
    /// Number of features: one past the largest 0-based index seen (or as generated).
    pub n_features: usize,
    /// One label per row.
    pub labels: Vec<f32>,
    /// The examples.
    pub rows: Vec<SparseRow>,
}

/// Column-major (CSC) sparse matrix (one coordinate update touches one column).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseColumns {
    /// Number of rows (examples).
    pub n_rows: usize,
    /// Column `j` is `column_starts[j]..column_starts[j + 1]` of `row_indices`/`values`.
    pub column_starts: Vec<usize>,
    /// Row index of each stored value, column by column.
    pub row_indices: Vec<u32>,
    /// The stored values, column by column.
    pub values: Vec<f32>,
}

impl SparseColumns {
    /// The columns `range` (all rows), renumbered from 0.
    pub fn columns(&self, range: std::ops::Range<usize>) -> SparseColumns {
        let lo = self.column_starts[range.start];
        let hi = self.column_starts[range.end];
        SparseColumns {
            n_rows: self.n_rows,
            column_starts: self.column_starts[range.start..=range.end]
                .iter()
                .map(|s| s - lo)
                .collect(),
            row_indices: self.row_indices[lo..hi].to_vec(),
            values: self.values[lo..hi].to_vec(),
        }
    }

    /// Number of columns (features).
    pub fn n_columns(&self) -> usize {
        self.column_starts.len().saturating_sub(1)
    }

    /// Row indices and values of column `j` (rows increasing).
    #[inline]
    pub fn column(&self, j: usize) -> (&[u32], &[f32]) {
        let range = self.column_starts[j]..self.column_starts[j + 1];
        (&self.row_indices[range.clone()], &self.values[range])
    }

    /// Squared L2 norm of every column.
    pub fn column_sq_norms(&self) -> Vec<f64> {
        (0..self.n_columns())
            .map(|j| self.column(j).1.iter().map(|&v| f64::from(v).powi(2)).sum())
            .collect()
    }

    /// Dot product of columns `j` and `k` (merge of two sorted index lists).
    pub fn column_dot(&self, j: usize, k: usize) -> f64 {
        let (rows_j, vals_j) = self.column(j);
        let (rows_k, vals_k) = self.column(k);
        let (mut a, mut b, mut sum) = (0, 0, 0.0f64);
        while a < rows_j.len() && b < rows_k.len() {
            match rows_j[a].cmp(&rows_k[b]) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => {
                    sum += f64::from(vals_j[a]) * f64::from(vals_k[b]);
                    a += 1;
                    b += 1;
                }
            }
        }
        sum
    }

    /// Builds CSC storage from a dense row-major matrix, dropping exact zeros.
    pub fn from_dense(x: &ndarray::Array2<f32>) -> Self {
        let (n_rows, n_cols) = x.dim();
        let mut column_starts = Vec::with_capacity(n_cols + 1);
        let mut row_indices = Vec::new();
        let mut values = Vec::new();
        column_starts.push(0);
        for j in 0..n_cols {
            for (i, &v) in x.column(j).iter().enumerate() {
                if v != 0.0 {
                    row_indices.push(i as u32);
                    values.push(v);
                }
            }
            column_starts.push(row_indices.len());
        }
        SparseColumns {
            n_rows,
            column_starts,
            row_indices,
            values,
        }
    }

    /// The sub-matrix of rows `rows` (renumbered from 0), keeping all columns.
    pub fn row_block(&self, rows: std::ops::Range<usize>) -> SparseColumns {
        let mut block = SparseColumns::empty(rows.len());
        for j in 0..self.n_columns() {
            let (r, v) = self.column(j);
            block.push_column_rows(r, v, &rows);
        }
        block
    }

    /// No columns yet, of `n_rows` rows.
    pub(crate) fn empty(n_rows: usize) -> Self {
        SparseColumns {
            n_rows,
            column_starts: vec![0],
            ..SparseColumns::default()
        }
    }

    /// Adds the column of rows `r` and values `v` restricted to `rows`, renumbered from 0.
    pub(crate) fn push_column_rows(&mut self, r: &[u32], v: &[f32], rows: &std::ops::Range<usize>) {
        let lo = r.partition_point(|&i| (i as usize) < rows.start);
        let hi = r.partition_point(|&i| (i as usize) < rows.end);
        self.row_indices
            .extend(r[lo..hi].iter().map(|&i| i - rows.start as u32));
        self.values.extend_from_slice(&v[lo..hi]);
        self.column_starts.push(self.row_indices.len());
    }
}

impl SparseDataset {
    /// Number of examples.
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }

    /// Converts to column-major storage (row indices increasing in each column).
    pub fn to_columns(&self) -> SparseColumns {
        let mut counts = vec![0usize; self.n_features + 1];
        for row in &self.rows {
            for &j in &row.indices {
                counts[j as usize + 1] += 1;
            }
        }
        for j in 0..self.n_features {
            counts[j + 1] += counts[j];
        }
        let column_starts = counts;
        let nnz = column_starts[self.n_features];
        let mut next = column_starts.clone();
        let mut row_indices = vec![0u32; nnz];
        let mut values = vec![0f32; nnz];
        for (i, row) in self.rows.iter().enumerate() {
            for (&j, &v) in row.indices.iter().zip(&row.values) {
                let slot = &mut next[j as usize];
                row_indices[*slot] = i as u32;
                values[*slot] = v;
                *slot += 1;
            }
        }
        SparseColumns {
            n_rows: self.rows.len(),
            column_starts,
            row_indices,
            values,
        }
    }
}

/// A LIBSVM file as parsed, rows one after the other (CSR): shared in a process
/// ([`load_libsvm_shared`]) and kept in the binary cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LibsvmFile {
    /// Number of features: one past the largest 0-based index.
    pub n_features: usize,
    /// One label per row.
    pub labels: Vec<f32>,
    /// `row_starts[i]..row_starts[i + 1]` is row `i`'s range of `indices` and `values`.
    pub row_starts: Vec<u64>,
    /// Every row's 0-based feature indices (strictly increasing within a row).
    pub indices: Vec<u32>,
    /// The value of each index.
    pub values: Vec<f32>,
    /// The line of the first row that reaches `n_features` (what the size check names).
    widest_line: u64,
}

impl LibsvmFile {
    /// Number of rows.
    pub fn n_rows(&self) -> usize {
        self.labels.len()
    }

    /// The indices and values of row `i`.
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let range = self.row_starts[i] as usize..self.row_starts[i + 1] as usize;
        (&self.indices[range.clone()], &self.values[range])
    }

    /// Calls `visit(label, row)` for every row in file order (one row buffer, reused).
    pub fn visit(
        &self,
        mut visit: impl FnMut(f32, &SparseRow) -> Result<(), MlError>,
    ) -> Result<(), MlError> {
        let mut row = SparseRow::default();
        for (i, &label) in self.labels.iter().enumerate() {
            let (indices, values) = self.row(i);
            row.set(indices, values);
            visit(label, &row)?;
        }
        Ok(())
    }

    /// The rows as a [`SparseDataset`].
    pub fn to_dataset(&self) -> SparseDataset {
        SparseDataset {
            n_features: self.n_features,
            labels: self.labels.clone(),
            rows: (0..self.n_rows())
                .map(|i| {
                    let (indices, values) = self.row(i);
                    let (indices, values) = (indices.to_vec(), values.to_vec());
                    SparseRow { indices, values }
                })
                .collect(),
        }
    }
}

impl Cached for LibsvmFile {
    const KIND: u32 = 1;
    fn fits(&self, limits: &DataLimits, size: &SizeRule, name: &Path) -> bool {
        let (line, width) = (self.widest_line as usize, self.n_features as u64);
        width == 0
            || (width <= limits.max_dimension
                && size.check(name, line, "feature index", width, 0).is_ok())
    }

    fn encode(&self, out: &mut Encoder) {
        out.u64(self.n_features as u64);
        out.u64(self.widest_line);
        out.array(&self.labels);
        out.array(&self.row_starts);
        out.array(&self.indices);
        out.array(&self.values);
    }

    fn decode(input: &mut Decoder<'_>) -> Option<Self> {
        let file = LibsvmFile {
            n_features: usize::try_from(input.u64()?).ok()?,
            widest_line: input.u64()?,
            labels: input.array()?,
            row_starts: input.array()?,
            indices: input.array()?,
            values: input.array()?,
        };
        // What the rows' accessors rely on.
        let rows_ok = file.row_starts.len() == file.labels.len() + 1
            && file.row_starts.first() == Some(&0)
            && file.row_starts.windows(2).all(|w| w[0] <= w[1])
            && file.row_starts.last() == Some(&(file.indices.len() as u64))
            && file.indices.len() == file.values.len()
            && file.indices.iter().all(|&j| (j as usize) < file.n_features);
        rows_ok.then_some(file)
    }
}

/// Loads a LIBSVM file under the [`DataLimits::from_env`] limits and the file's size
/// ([`super::limits::size_bound`]).
pub fn load_libsvm(path: impl AsRef<Path>) -> Result<SparseDataset, MlError> {
    Ok(load_libsvm_shared(path)?.to_dataset())
}

/// [`load_libsvm`]'s rows as the process shares them (one parse per file version, see
/// [`super::cache`]).
pub fn load_libsvm_shared(path: impl AsRef<Path>) -> Result<Arc<LibsvmFile>, MlError> {
    let path = path.as_ref();
    cache::load_file(path, "libsvm", false, |source, limits, size| {
        collect_rows(source, path, limits, size)
    })
}

/// Parses LIBSVM text under the [`DataLimits::from_env`] limits; see
/// [`parse_libsvm_with_limits`].
pub fn parse_libsvm(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<SparseDataset, MlError> {
    parse_libsvm_with_limits(reader, name_for_errors, &DataLimits::from_env()?)
}

/// Parses LIBSVM text. `#` starts a comment; blank lines and `qid:` tokens are skipped.
/// Rejects index 0, non-increasing indices, non-finite labels or values, and an index above
/// `limits.max_dimension` or what the text's size allows ([`super::limits::size_bound`],
/// checked once all of it has been read).
pub fn parse_libsvm_with_limits(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
    limits: &DataLimits,
) -> Result<SparseDataset, MlError> {
    let name = name_for_errors.as_ref();
    let mut source = ReaderBlocks::new(reader, name);
    Ok(collect_rows(&mut source, name, limits, SizeRule::new(None)?)?.to_dataset())
}

/// The rows of LIBSVM text, their largest index checked against `size` once all are read.
fn collect_rows(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
) -> Result<LibsvmFile, MlError> {
    let parser = LibsvmParser {
        name,
        limits,
        size: None,
    };
    let mut rows = LibsvmFile {
        row_starts: vec![0],
        ..LibsvmFile::default()
    };
    let end = parse_chunks(&parser, name, source, Start::default(), |chunk, at| {
        if chunk.widest.1 > rows.n_features {
            rows.n_features = chunk.widest.1;
            rows.widest_line = (at.line + chunk.widest.0) as u64;
        }
        let mut next = rows.indices.len() as u64;
        rows.row_starts.extend(chunk.lens.iter().map(|&n| {
            next += u64::from(n);
            next
        }));
        rows.labels.extend_from_slice(&chunk.labels);
        rows.indices.extend_from_slice(&chunk.indices);
        rows.values.extend_from_slice(&chunk.values);
        Ok(())
    })?;
    if rows.n_features > 0 {
        let (line, width) = (rows.widest_line as usize, rows.n_features as u64);
        size.check(name, line, "feature index", width, end.bytes)?;
    }
    Ok(rows)
}

/// Calls `visit(label, row)` for every row of the LIBSVM file `path`, in order, under the
/// [`DataLimits::from_env`] limits; every index is checked against the file's size before
/// `visit` sees its row. The rows come from [`load_libsvm_shared`].
pub fn visit_libsvm(
    path: impl AsRef<Path>,
    mut visit: impl FnMut(f32, &SparseRow) -> Result<(), MlError>,
) -> Result<(), MlError> {
    let path = path.as_ref();
    match load_libsvm_shared(path) {
        Ok(rows) => rows.visit(visit),
        // The rows before the error are visited and the error is the row-by-row reader's.
        Err(_) => {
            let file = std::fs::File::open(path).map_err(|e| MlError::io(path, e))?;
            let (limits, key) = (DataLimits::from_env()?, FileKey::of(path, &file)?);
            cache::parse_file(path, &file, key.as_ref(), false, |source, size| {
                stream_rows(source, path, &limits, size, &mut visit)
            })
        }
    }
}

/// Hands `visit` every row of `source` with the checks of [`parse_libsvm_with_limits`]
/// (memory: one block of the text), each row checked against `size` first.
pub(super) fn stream_rows(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
    mut visit: impl FnMut(f32, &SparseRow) -> Result<(), MlError>,
) -> Result<(), MlError> {
    let parser = LibsvmParser {
        name,
        limits,
        size: Some(size),
    };
    let mut row = SparseRow::default();
    parse_chunks(&parser, name, source, Start::default(), |chunk, _| {
        let mut from = 0;
        for (&label, &n) in chunk.labels.iter().zip(&chunk.lens) {
            let to = from + n as usize;
            row.set(&chunk.indices[from..to], &chunk.values[from..to]);
            from = to;
            visit(label, &row)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The rows of one chunk.
#[derive(Debug, Default)]
struct RowsChunk {
    labels: Vec<f32>,
    /// Entries of each row.
    lens: Vec<u32>,
    indices: Vec<u32>,
    values: Vec<f32>,
    /// The chunk's line of its first row that reaches its largest index, and that index + 1.
    widest: (usize, usize),
}

/// LIBSVM's parser of a chunk; with `size`, each row is checked against it before it is kept.
struct LibsvmParser<'a> {
    name: &'a Path,
    limits: &'a DataLimits,
    size: Option<SizeRule>,
}

impl ChunkParser for LibsvmParser<'_> {
    type Out = RowsChunk;

    fn parse(&self, text: &str, start: Start, chunk: &mut Chunk<RowsChunk>) {
        parse_lines(text, chunk, |line, ascii, chunk| {
            let kept = chunk.out.indices.len();
            let row = self.row(line, ascii, start, chunk);
            if row.is_err() {
                chunk.out.indices.truncate(kept);
                chunk.out.values.truncate(kept);
            }
            row
        });
    }

    fn holds(&self, chunk: &Chunk<RowsChunk>, start: &Start) -> bool {
        match &self.size {
            Some(size) => size.covers(chunk.excess, start.bytes),
            None => true,
        }
    }
}

impl LibsvmParser<'_> {
    /// Parses one line into `chunk`'s rows (nothing for a blank or comment line).
    #[inline]
    fn row(
        &self,
        line: &str,
        ascii: bool,
        start: Start,
        chunk: &mut Chunk<RowsChunk>,
    ) -> Result<(), MlError> {
        let name = self.name;
        let (local_line, local_bytes) = (chunk.lines, chunk.bytes);
        let line_no = start.line + local_line;
        let content = match memchr::memchr(b'#', line.as_bytes()) {
            Some(i) => &line[..i],
            None => line,
        };
        let mut tokens = words(content, ascii);
        let Some(label_text) = tokens.next() else {
            return Ok(());
        };
        let bad = |msg: String| MlError::malformed(name, line_no, msg);
        let not =
            |what: &str, text: &str, is: &str| bad(format!("{what} {:?} is not {is}", clip(text)));
        let label = parse_f32(label_text).ok_or_else(|| not("label", label_text, "a number"))?;
        if !label.is_finite() {
            return Err(not("label", label_text, "finite"));
        }
        let rows = &mut chunk.out;
        let first = rows.indices.len();
        for token in tokens {
            if token.starts_with("qid:") {
                continue;
            }
            let (idx_text, val_text) = token
                .split_once(':')
                .ok_or_else(|| not("feature", token, "idx:value"))?;
            let index: u64 =
                parse_uint(idx_text).ok_or_else(|| not("feature index", idx_text, "an integer"))?;
            if index == 0 {
                return Err(bad("feature index 0: LIBSVM indices are 1-based".into()));
            }
            if index > u64::from(u32::MAX) {
                return Err(bad(format!("feature index {index} exceeds u32")));
            }
            self.limits
                .check_dimension(name, line_no, "feature index", index)?;
            let zero_based = (index - 1) as u32;
            if rows.indices.len() > first
                && let Some(&previous) = rows.indices.last()
                && zero_based <= previous
            {
                return Err(bad(format!(
                    "feature index {index} does not increase (previous {})",
                    previous + 1
                )));
            }
            let value =
                parse_f32(val_text).ok_or_else(|| not("feature value", val_text, "a number"))?;
            if !value.is_finite() {
                return Err(not("feature value", val_text, "finite"));
            }
            rows.indices.push(zero_based);
            rows.values.push(value);
        }
        let n = rows.indices.len() - first;
        // Indices increase, so the last is the row's largest.
        let width = rows.indices.last().filter(|_| n > 0).map(|&j| j as u64 + 1);
        let mut excess = None;
        if let (Some(size), Some(width)) = (&self.size, width) {
            if size.is_known() || start.exact {
                let read = start.bytes + local_bytes;
                size.check(name, line_no, "feature index", width, read)?;
            } else {
                excess = Some(size.excess(width, local_bytes));
            }
        }
        if let Some(width) = width
            && width as usize > rows.widest.1
        {
            rows.widest = (local_line, width as usize);
        }
        rows.labels.push(label);
        rows.lens.push(n as u32);
        if let Some(excess) = excess {
            chunk.excess = chunk.excess.max(excess);
        }
        Ok(())
    }
}

/// At most 200 bytes of `text`: what an error quotes of it.
pub(crate) fn clip(text: &str) -> &str {
    petrel_messages::clip(text, 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testing::{line_of, refused, stream_libsvm, write_in};
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<SparseDataset, MlError> {
        parse_libsvm(text.as_bytes(), "test.svm")
    }

    #[test]
    fn parses_rows_comments_and_blank_lines() {
        let data = parse("# header\n1 1:0.5 3:2\n\n-1 2:1 # trailing\n0\n").unwrap();
        assert_eq!(data.n_features, 3);
        assert_eq!(data.labels, vec![1.0, -1.0, 0.0]);
        assert_eq!(data.rows[0].indices, vec![0, 2]);
        assert_eq!(data.rows[0].values, vec![0.5, 2.0]);
        assert_eq!(data.rows[1].indices, vec![1]);
        assert!(data.rows[2].indices.is_empty());
    }

    #[test]
    fn rejects_bad_input_with_line_numbers() {
        assert_eq!(line_of(parse("1 1:1\n1 0:1\n").unwrap_err()), 2);
        assert_eq!(line_of(parse("1 2:1 2:1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("1 3:1 2:1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("\n\n1 1:NaN\n").unwrap_err()), 3);
        assert_eq!(line_of(parse("nan 1:1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("x 1:1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("1 1-1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("1 a:1\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("1 1:b\n").unwrap_err()), 1);
        assert_eq!(line_of(parse("1 -3:1\n").unwrap_err()), 1);
        let err = parse("1 0:1\n").unwrap_err().to_string();
        assert!(err.starts_with("test.svm:1: "), "{err}");
    }

    #[test]
    fn huge_feature_index_is_refused_naming_file_line_and_limit() {
        // `0.5 4000000000:0.1` must be refused at parse: `to_columns` would ask for 32 GB
        // and abort the process without naming the file.
        let limits = DataLimits {
            max_dimension: 1000,
            ..DataLimits::default()
        };
        let text = "1 1:1\n0.5 4000000000:0.1\n";
        let err = parse_libsvm_with_limits(text.as_bytes(), "big.svm", &limits).unwrap_err();
        let message = err.to_string();
        assert_eq!(
            refused(&err),
            ("limit", 2, 4_000_000_000, 1000),
            "{message}"
        );
        assert!(
            message.starts_with("big.svm:2: feature index 4000000000"),
            "{message}"
        );
        assert!(message.contains("PETREL_DATA__MAX_DIMENSION"), "{message}");
        // The default limit refuses it as well, and an index at the limit is accepted.
        assert!(matches!(
            refused(&parse(text).unwrap_err()),
            ("limit", 2, ..)
        ));
        let at_limit = parse_libsvm_with_limits("1 1000:1\n".as_bytes(), "ok.svm", &limits);
        assert_eq!(at_limit.unwrap().n_features, 1000);
    }

    #[test]
    fn feature_index_beyond_the_files_size_is_refused_before_it_is_visited() {
        // Two rows, one index of 2^26: what would size a 2^26-column model from 40 bytes.
        let text = "1 1:1\n0 67108864:1\n";
        let dir = tempfile::tempdir().unwrap();
        let path = write_in(dir.path(), "wide.svm", text);
        let mut rows = 0;
        let err = visit_libsvm(&path, |_, _| {
            rows += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(rows, 1, "the wide row must not be visited");
        let message = err.to_string();
        assert_eq!(refused(&err), ("input", 2, 67_108_864, 19), "{message}");
        assert!(
            message.contains("wide.svm:2: feature index 67108864"),
            "{message}"
        );
        assert!(matches!(
            refused(&load_libsvm(&path).unwrap_err()),
            ("input", 2, ..)
        ));
        assert!(matches!(
            refused(&parse(text).unwrap_err()),
            ("input", 2, ..)
        ));
        let mut seen = 0;
        let streamed = stream_libsvm(text, "wide.svm", &DataLimits::default(), |_, _| {
            seen += 1;
            Ok(())
        });
        assert!(matches!(refused(&streamed.unwrap_err()), ("input", 2, ..)));
        assert_eq!(seen, 1);
    }

    #[test]
    fn wide_files_that_hold_their_width_are_read() {
        // Any file may reach the allowance; past it, bytes pay for the width (16 ids each).
        assert_eq!(parse("1 1048576:1\n").unwrap().n_features, 1 << 20);
        let padding = "0 1:1\n".repeat(20_000);
        let text = format!("{padding}1 2000000:1\n");
        assert_eq!(parse(&text).unwrap().n_features, 2_000_000);
        let dir = tempfile::tempdir().unwrap();
        // The index comes first, yet the file's size pays for it.
        let path = write_in(dir.path(), "wide.svm", format!("1 2000000:1\n{padding}"));
        assert_eq!(load_libsvm(&path).unwrap().n_features, 2_000_000);
        let mut n = 0;
        visit_libsvm(&path, |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 20_001);
    }

    #[test]
    fn missing_file_is_io_error() {
        let err = load_libsvm("/nonexistent/file.svm").unwrap_err();
        assert!(matches!(err, MlError::Io { .. }));
    }

    #[test]
    fn loads_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_in(dir.path(), "a.svm", "1 1:1 2:2\n0 2:3\n");
        let data = load_libsvm(&path).unwrap();
        assert_eq!(data.n_rows(), 2);
        let cols = data.to_columns();
        assert_eq!(cols.column(0), (&[0u32][..], &[1.0f32][..]));
        assert_eq!(cols.column(1), (&[0u32, 1][..], &[2.0f32, 3.0][..]));
        assert!((cols.column_dot(0, 1) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn row_block_renumbers_rows() {
        let x = ndarray::array![[1.0f32, 0.0], [0.0, 2.0], [3.0, 4.0]];
        let cols = SparseColumns::from_dense(&x);
        let block = cols.row_block(1..3);
        assert_eq!(block.n_rows, 2);
        assert_eq!(block.column(0), (&[1u32][..], &[3.0f32][..]));
        assert_eq!(block.column(1), (&[0u32, 1][..], &[2.0f32, 4.0][..]));
    }

    proptest! {
        #[test]
        fn csc_round_trips_every_entry(
            rows in proptest::collection::vec(
                proptest::collection::btree_map(0u32..20, -5.0f32..5.0, 0..6), 0..15)
        ) {
            let dataset = SparseDataset {
                n_features: 20,
                labels: vec![0.0; rows.len()],
                rows: rows.iter().map(|m| SparseRow {
                    indices: m.keys().copied().collect(),
                    values: m.values().copied().collect(),
                }).collect(),
            };
            let cols = dataset.to_columns();
            let mut seen = 0;
            for j in 0..cols.n_columns() {
                let (r, v) = cols.column(j);
                prop_assert!(r.windows(2).all(|w| w[0] < w[1]));
                for (&i, &val) in r.iter().zip(v) {
                    prop_assert_eq!(rows[i as usize].get(&(j as u32)), Some(&val));
                    seen += 1;
                }
            }
            prop_assert_eq!(seen, rows.iter().map(|m| m.len()).sum::<usize>());
        }

        #[test]
        fn parser_never_panics(text in "[0-9a-z:#. \\-\n]{0,80}") {
            let _ = parse(&text);
        }
    }
}
