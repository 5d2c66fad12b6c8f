//! MatrixMarket coordinate files (`matrix coordinate (real|integer) general`, 1-based),
//! checked against the size line, its nnz and the data limits.

use super::{IdMapping, Ratings};
use crate::data::limits::SizeRule;
use crate::data::text::{
    Blocks, Chunk, ChunkParser, ReaderBlocks, Start, each_line, parse_chunks, parse_f32,
    parse_lines, parse_uint, three_words, trim,
};
use crate::data::{DataLimits, MlError};
use std::io::BufRead;
use std::path::Path;

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
/// ([`crate::data::limits::size_bound`]). Entries are never reserved by nnz.
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
pub(super) fn matrix_market_ratings(
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
pub(super) fn numbered(n_users: usize, n_items: usize) -> Ratings {
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
pub(super) fn matrix_market(
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
