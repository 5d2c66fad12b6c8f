//! UCI "bag of words" corpora: `docword.txt` (header lines D, W, NNZ then `docID wordID count`,
//! all 1-based) and an optional `vocab.txt` (one word per line, line n = word n).

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::cache::{self, Cached, Decoder, Encoder};
use super::limits::SizeRule;
use super::text::{
    Blocks, Chunk, ChunkParser, ReaderBlocks, Start, each_line, is_space, parse_chunks,
    parse_lines, parse_uint, three_words, trim,
};
use super::{DataLimits, MlError, ReadDigest, open_buffered};

/// A tokenised corpus: each document its 0-based word ids, one per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Corpus {
    /// Number of documents.
    pub n_docs: usize,
    /// Number of distinct words (word ids are below it).
    pub vocab_size: usize,
    /// Each document's tokens as word ids, one entry per occurrence.
    pub docs: Vec<Vec<u32>>,
    /// The words, when a vocabulary file was read.
    pub vocab: Option<Vec<String>>,
}

impl Corpus {
    /// Tokens over all documents.
    pub fn n_tokens(&self) -> usize {
        self.docs.iter().map(Vec::len).sum()
    }

    /// Number of tokens of every word.
    pub fn word_frequencies(&self) -> Vec<usize> {
        let mut freq = vec![0; self.vocab_size];
        for doc in &self.docs {
            for &w in doc {
                freq[w as usize] += 1;
            }
        }
        freq
    }
}

/// A corpus's document lengths and word frequencies, without its tokens.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorpusStats {
    /// Number of documents.
    pub n_docs: usize,
    /// Number of distinct words.
    pub vocab_size: usize,
    /// Tokens of every document.
    pub doc_lengths: Vec<usize>,
    /// Tokens of every word.
    pub word_frequencies: Vec<usize>,
}

impl CorpusStats {
    /// The statistics digested ([`ReadDigest::value`]), for nodes to compare.
    pub fn digest(&self) -> u64 {
        let mut d = ReadDigest::default();
        d.add(self.n_docs as u64);
        d.add(self.vocab_size as u64);
        self.doc_lengths.iter().for_each(|&n| d.add(n as u64));
        self.word_frequencies.iter().for_each(|&n| d.add(n as u64));
        d.value()
    }

    /// The statistics of a corpus held in memory.
    pub fn of(corpus: &Corpus) -> Self {
        CorpusStats {
            n_docs: corpus.n_docs,
            vocab_size: corpus.vocab_size,
            doc_lengths: corpus.docs.iter().map(Vec::len).collect(),
            word_frequencies: corpus.word_frequencies(),
        }
    }

    /// Tokens over all documents.
    pub fn n_tokens(&self) -> usize {
        self.doc_lengths.iter().sum()
    }

    /// Counts `count` occurrences of `word` in document `doc` (grown as entries name them).
    fn add(&mut self, doc: usize, word: usize, count: usize) {
        if self.doc_lengths.len() <= doc {
            self.doc_lengths.resize(doc + 1, 0);
        }
        if self.word_frequencies.len() <= word {
            self.word_frequencies.resize(word + 1, 0);
        }
        self.doc_lengths[doc] += count;
        self.word_frequencies[word] += count;
    }
}

/// Loads `docword` and, if given, `vocab` (whose length must equal the header's W).
pub fn load_bow(
    docword_path: impl AsRef<Path>,
    vocab_path: Option<&Path>,
) -> Result<Corpus, MlError> {
    Ok(load_bow_digested(docword_path, vocab_path)?.0)
}

/// [`load_bow`] and the digest of every value read from the docword file.
pub fn load_bow_digested(
    docword_path: impl AsRef<Path>,
    vocab_path: Option<&Path>,
) -> Result<(Corpus, ReadDigest), MlError> {
    let docword_path = docword_path.as_ref();
    let entries = load_entries_shared(docword_path)?;
    let mut assembler = Assembler::new(&|_| true);
    assembler.add(&entries.header, &entries.entries);
    let (mut corpus, _, read) = assembler.finish(entries.header);
    drop(entries);
    if let Some(vocab_path) = vocab_path {
        let vocab = parse_vocab(open_buffered(vocab_path)?, vocab_path)?;
        if vocab.len() != corpus.vocab_size {
            return Err(MlError::malformed(
                vocab_path,
                vocab.len(),
                format!(
                    "vocabulary has {} words but docword header says W = {}",
                    vocab.len(),
                    corpus.vocab_size
                ),
            ));
        }
        corpus.vocab = Some(vocab);
    }
    Ok((corpus, read))
}

/// A docword file as parsed (shared in a process and kept in the binary cache).
#[derive(Debug, Clone, Default, PartialEq)]
struct DocwordFile {
    /// D, W and NNZ.
    header: [usize; 3],
    entries: Entries,
}

/// `(doc, word, count)` entries, 0-based ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Entries {
    docs: Vec<u32>,
    words: Vec<u32>,
    counts: Vec<u32>,
}

impl Cached for DocwordFile {
    const KIND: u32 = 3;
    fn fits(&self, limits: &DataLimits, size: &SizeRule, name: &Path) -> bool {
        let [d, w, _] = self.header.map(|v| v as u64);
        let tokens: u64 = self.entries.counts.iter().map(|&c| u64::from(c)).sum();
        d <= limits.max_documents
            && w <= limits.max_dimension
            && tokens <= limits.max_tokens
            && size.check(name, 0, "document count D", d, 0).is_ok()
            && size.check(name, 0, "vocabulary size W", w, 0).is_ok()
    }

    fn encode(&self, out: &mut Encoder) {
        self.header.iter().for_each(|&v| out.u64(v as u64));
        out.array(&self.entries.docs);
        out.array(&self.entries.words);
        out.array(&self.entries.counts);
    }

    fn decode(input: &mut Decoder<'_>) -> Option<Self> {
        let mut header = [0usize; 3];
        for slot in &mut header {
            *slot = usize::try_from(input.u64()?).ok()?;
        }
        let entries = Entries {
            docs: input.array()?,
            words: input.array()?,
            counts: input.array()?,
        };
        let ok = entries.docs.len() == header[2]
            && entries.words.len() == header[2]
            && entries.counts.len() == header[2]
            && entries.docs.iter().all(|&d| (d as usize) < header[0])
            && entries.words.iter().all(|&w| (w as usize) < header[1])
            && entries
                .counts
                .iter()
                .all(|&c| u64::from(c) <= MAX_COUNT_PER_ENTRY);
        ok.then_some(DocwordFile { header, entries })
    }
}

/// The entries of the docword file `path` as the process shares them.
fn load_entries_shared(path: &Path) -> Result<Arc<DocwordFile>, MlError> {
    cache::load_file(path, "docword", false, |source, limits, size| {
        collect_entries(source, path, limits, size)
    })
}

/// Every entry of a docword text.
fn collect_entries(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
) -> Result<DocwordFile, MlError> {
    let mut entries = Entries::default();
    let header = docword(source, name, limits, size, |_, chunk| {
        entries.docs.extend_from_slice(&chunk.docs);
        entries.words.extend_from_slice(&chunk.words);
        entries.counts.extend_from_slice(&chunk.counts);
    })?;
    Ok(DocwordFile { header, entries })
}

/// Parses vocabulary text: one word per line, trimmed; a blank line (which would shift
/// every following id) is an error.
pub fn parse_vocab(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Vec<String>, MlError> {
    let name = name_for_errors.as_ref();
    let mut words = Vec::new();
    let mut source = ReaderBlocks::new(reader, name);
    each_line(name, &mut source, Start::default(), |line_no, line, _| {
        let word = line.trim();
        if word.is_empty() {
            return Err(MlError::malformed(name, line_no, "empty vocabulary line"));
        }
        words.push(word.to_owned());
        Ok(true)
    })?;
    Ok(words)
}

/// Largest count one `(doc, word, count)` line may carry.
pub const MAX_COUNT_PER_ENTRY: u64 = 100_000;

/// Parses `docword.txt` under the [`DataLimits::from_env`] limits; see
/// [`parse_docword_with_limits`].
pub fn parse_docword(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
) -> Result<Corpus, MlError> {
    parse_docword_with_limits(reader, name_for_errors, &DataLimits::from_env()?)
}

/// Parses `docword.txt`. Blank lines are skipped; ids are checked against D and W, the
/// entry lines against NNZ, D, W and the tokens against `limits`, and D and W against the
/// input's size ([`super::limits::size_bound`]). Documents are allocated as entries name
/// them; the empty ones up to D only once the whole file has been checked.
pub fn parse_docword_with_limits(
    reader: impl BufRead,
    name_for_errors: impl AsRef<Path>,
    limits: &DataLimits,
) -> Result<Corpus, MlError> {
    let (name, size) = (name_for_errors.as_ref(), SizeRule::new(None)?);
    Ok(parse_docword_part(reader, name, limits, size, &|_| true)?.0)
}

/// [`parse_docword_with_limits`] of an input whose size `size` may know, keeping only the
/// tokens of the documents `keep` accepts (the others stay empty), with the statistics of
/// every document and the digest of every value read. Every check applies to every line.
pub(crate) fn parse_docword_part(
    reader: impl BufRead,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
    keep: &dyn Fn(usize) -> bool,
) -> Result<(Corpus, CorpusStats, ReadDigest), MlError> {
    let mut assembler = Assembler::new(keep);
    let mut source = ReaderBlocks::new(reader, name);
    let header = docword(&mut source, name, limits, size, |header, chunk| {
        assembler.add(header, chunk)
    })?;
    Ok(assembler.finish(header))
}

/// Builds a corpus, its statistics and the digest from the header and the entries in order.
struct Assembler<'a> {
    keep: &'a dyn Fn(usize) -> bool,
    read: ReadDigest,
    header_read: bool,
    docs: Vec<Vec<u32>>,
    stats: CorpusStats,
}

impl<'a> Assembler<'a> {
    fn new(keep: &'a dyn Fn(usize) -> bool) -> Self {
        Assembler {
            keep,
            read: ReadDigest::default(),
            header_read: false,
            docs: Vec::new(),
            stats: CorpusStats::default(),
        }
    }

    fn add(&mut self, header: &[usize; 3], entries: &Entries) {
        let Assembler {
            keep,
            read,
            header_read,
            docs,
            stats,
        } = self;
        if !std::mem::replace(header_read, true) {
            header.iter().for_each(|&v| read.add(v as u64));
        }
        let all = || entries.docs.iter().zip(&entries.words).zip(&entries.counts);
        std::thread::scope(|scope| {
            // The digest is one chain through every value read: it runs beside the rest.
            scope.spawn(move || {
                for ((&doc, &word), &count) in all() {
                    read.add(u64::from(doc + 1) << 32 | u64::from(word + 1));
                    read.add(u64::from(count));
                }
            });
            let (mut low, mut high) = (usize::MAX, 0);
            for ((&doc, &word), &count) in all() {
                let doc = doc as usize;
                stats.add(doc, word as usize, count as usize);
                (low, high) = (low.min(doc), high.max(doc));
            }
            if low > high {
                return;
            }
            // The statistics know each document's length by now: a kept one grows once to
            // it instead of doubling as its tokens come.
            let kept: Vec<bool> = (low..=high).map(keep).collect();
            if docs.len() <= high {
                docs.resize_with(high + 1, Vec::new);
            }
            for (doc, _) in (low..=high).zip(&kept).filter(|(_, kept)| **kept) {
                let tokens = &mut docs[doc];
                tokens.reserve(stats.doc_lengths[doc] - tokens.len());
            }
            let threads = super::text::Split::current().threads;
            fill(&mut docs[low..=high], low, &kept, entries, threads);
        });
    }

    /// The corpus (documents up to D), its statistics and the digest.
    fn finish(mut self, header: [usize; 3]) -> (Corpus, CorpusStats, ReadDigest) {
        self.add(&header, &Entries::default());
        let [n_docs, vocab_size, _] = header;
        self.docs.resize_with(n_docs, Vec::new);
        let mut stats = self.stats;
        stats.n_docs = n_docs;
        stats.vocab_size = vocab_size;
        stats.doc_lengths.resize(n_docs, 0);
        stats.word_frequencies.resize(vocab_size, 0);
        let corpus = Corpus {
            n_docs,
            vocab_size,
            docs: self.docs,
            vocab: None,
        };
        (corpus, stats, self.read)
    }
}

/// Appends the tokens of `entries` to `docs`, documents `low..` (those `kept`, with room),
/// on up to `threads` threads each filling a range of documents (writing is the cost).
fn fill(docs: &mut [Vec<u32>], low: usize, kept: &[bool], entries: &Entries, threads: usize) {
    let per = docs.len().div_ceil(threads.max(1));
    std::thread::scope(|scope| {
        for (part, docs) in docs.chunks_mut(per).enumerate() {
            let (from, kept) = (low + part * per, &kept[part * per..]);
            scope.spawn(move || {
                let all = entries.docs.iter().zip(&entries.words).zip(&entries.counts);
                for ((&doc, &word), &count) in all {
                    let i = (doc as usize).wrapping_sub(from);
                    if i < docs.len() && kept[i] {
                        docs[i].extend(std::iter::repeat_n(word, count as usize));
                    }
                }
            });
        }
    });
}

/// Reads a docword text: the header on its own, then the entries a chunk at a time into
/// `sink(header, entries)`, in file order; returns the header once every check passed.
fn docword(
    source: &mut dyn Blocks,
    name: &Path,
    limits: &DataLimits,
    size: SizeRule,
    mut sink: impl FnMut(&[usize; 3], &Entries),
) -> Result<[usize; 3], MlError> {
    let mut header: Vec<usize> = Vec::with_capacity(3);
    let mut header_lines: Vec<usize> = Vec::with_capacity(3);
    let start = each_line(name, source, Start::default(), |line_no, line, bytes| {
        let content = line.trim();
        if content.is_empty() {
            return Ok(true);
        }
        let bad = |msg: String| MlError::malformed(name, line_no, msg);
        let what = ["document count D", "vocabulary size W", "entry count NNZ"][header.len()];
        let clipped = super::libsvm::clip(content);
        let value: usize = parse_uint(content)
            .ok_or_else(|| bad(format!("{what} {clipped:?} is not an integer")))?;
        if header.len() < 2 && value > u32::MAX as usize {
            return Err(bad(format!("{what} {value} exceeds u32")));
        }
        match header.len() {
            0 => limits.check_documents(name, line_no, value as u64)?,
            1 => limits.check_dimension(name, line_no, what, value as u64)?,
            _ => {}
        }
        if header.len() < 2 && size.is_known() {
            size.check(name, line_no, what, value as u64, bytes)?;
        }
        header.push(value);
        header_lines.push(line_no);
        Ok(header.len() < 3)
    })?;
    let &[n_docs, vocab_size, nnz] = header.as_slice() else {
        let missing = "missing header (D, W, NNZ on three lines)";
        return Err(MlError::malformed(name, start.line, missing));
    };
    let header = [n_docs, vocab_size, nnz];
    let parser = DocwordParser {
        name,
        limits,
        size,
        n_docs: n_docs as u64,
        vocab_size: vocab_size as u64,
        nnz: nnz as u64,
    };
    let end = parse_chunks(&parser, name, source, start, |entries, _| {
        sink(&header, &entries);
        Ok(())
    })?;
    if end.entries != nnz as u64 {
        let found = format!("header says NNZ = {nnz} but found {} entries", end.entries);
        return Err(MlError::malformed(name, end.line, found));
    }
    if !size.is_known() {
        for (k, what) in ["document count D", "vocabulary size W"]
            .into_iter()
            .enumerate()
        {
            size.check(name, header_lines[k], what, header[k] as u64, end.bytes)?;
        }
    }
    Ok(header)
}

/// The entry lines of a docword text.
struct DocwordParser<'a> {
    name: &'a Path,
    limits: &'a DataLimits,
    size: SizeRule,
    n_docs: u64,
    vocab_size: u64,
    nnz: u64,
}

impl ChunkParser for DocwordParser<'_> {
    type Out = Entries;

    fn parse(&self, text: &str, start: Start, chunk: &mut Chunk<Entries>) {
        // Entry lines take 6 bytes or more, about 12 usually: room without growing copies.
        let entries = text.len() / 10;
        let out = &mut chunk.out;
        out.docs.reserve(entries);
        out.words.reserve(entries);
        out.counts.reserve(entries);
        parse_lines(text, chunk, |line, ascii, chunk| {
            self.entry(line, ascii, start, chunk)
        });
    }

    fn holds(&self, chunk: &Chunk<Entries>, start: &Start) -> bool {
        start.entries + chunk.entries <= self.nnz
            && start.tokens + chunk.tokens <= self.limits.max_tokens
            && (self.size.is_known() || self.size.covers(chunk.excess, start.bytes))
    }
}

impl DocwordParser<'_> {
    #[inline]
    fn entry(
        &self,
        line: &str,
        ascii: bool,
        start: Start,
        chunk: &mut Chunk<Entries>,
    ) -> Result<(), MlError> {
        let (name, line_no) = (self.name, start.line + chunk.lines);
        let bad = |msg: String| MlError::malformed(name, line_no, msg);
        let numbers = match numeric_entry(line.as_bytes()) {
            Some(numbers) => numbers,
            None => match entry_numbers(line, ascii, bad)? {
                Some(numbers) => numbers,
                None => return Ok(()),
            },
        };
        let [doc, word, count] = numbers;
        let (n_docs, vocab_size) = (self.n_docs, self.vocab_size);
        if doc == 0 || doc > n_docs {
            return Err(bad(format!("docID {doc} outside 1..={n_docs}")));
        }
        if word == 0 || word > vocab_size {
            return Err(bad(format!("wordID {word} outside 1..={vocab_size}")));
        }
        if !self.size.is_known() {
            // Both size a table downstream before the header's D and W have been checked.
            if start.exact {
                let bytes = start.bytes + chunk.bytes;
                self.size.check(name, line_no, "docID", doc, bytes)?;
                self.size.check(name, line_no, "wordID", word, bytes)?;
            } else {
                let excess = self.size.excess(doc.max(word), chunk.bytes);
                chunk.excess = chunk.excess.max(excess);
            }
        }
        if count > MAX_COUNT_PER_ENTRY {
            return Err(bad(format!(
                "count {count} exceeds the supported {MAX_COUNT_PER_ENTRY} per entry"
            )));
        }
        chunk.tokens += count;
        self.limits
            .check_tokens(name, line_no, start.tokens + chunk.tokens)?;
        chunk.entries += 1;
        if start.entries + chunk.entries > self.nnz {
            return Err(bad(format!("more entries than NNZ = {}", self.nnz)));
        }
        let out = &mut chunk.out;
        out.docs.push((doc - 1) as u32);
        out.words.push((word - 1) as u32);
        out.counts.push(count as u32);
        Ok(())
    }
}

/// The numbers of an entry line, `None` for a blank one: any line, word by word.
fn entry_numbers(
    line: &str,
    ascii: bool,
    bad: impl Fn(String) -> MlError,
) -> Result<Option<[u64; 3]>, MlError> {
    let content = trim(line, ascii);
    if content.is_empty() {
        return Ok(None);
    }
    let Some(fields) = three_words(content, ascii) else {
        return Err(bad("entry must be `docID wordID count`".into()));
    };
    let mut numbers = [0u64; 3];
    for (slot, (text, what)) in numbers
        .iter_mut()
        .zip(fields.iter().zip(["docID", "wordID", "count"]))
    {
        *slot = parse_uint(text).ok_or_else(|| {
            bad(format!(
                "{what} {:?} is not a non-negative integer",
                super::libsvm::clip(text)
            ))
        })?;
    }
    Ok(Some(numbers))
}

/// The common entry line, three runs of at most 19 decimal digits between ASCII whitespace,
/// read in one pass: what [`entry_numbers`] reads from it; `None` for any other line.
#[inline]
fn numeric_entry(line: &[u8]) -> Option<[u64; 3]> {
    let mut numbers = [0u64; 3];
    let mut at = 0;
    for (k, slot) in numbers.iter_mut().enumerate() {
        let spaced = at;
        while at < line.len() && is_space(line[at]) {
            at += 1;
        }
        // Numbers are separated: a digit or anything else right after one is not.
        if k > 0 && at == spaced {
            return None;
        }
        let from = at;
        // Any 19 digits fit in a u64; longer runs are left to the general path.
        while at < line.len() && at - from < 19 && line[at].is_ascii_digit() {
            *slot = *slot * 10 + u64::from(line[at] - b'0');
            at += 1;
        }
        if at == from {
            return None;
        }
    }
    line[at..].iter().all(|&b| is_space(b)).then_some(numbers)
}

#[cfg(test)]
mod tests;
