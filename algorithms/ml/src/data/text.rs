// Over 600 lines: the block-parallel text engine under every loader, with its number parsing.
//! The text engine under every loader: the input is cut into blocks, each block into
//! line-aligned chunks parsed in parallel and handed on in file order, so a loader sees
//! exactly what a line-by-line reader would.
//!
//! A chunk parsed ahead does not know where it starts: it is parsed from a zero [`Start`],
//! checks that need the true start are only recorded, and a chunk with an error or whose
//! records do not hold at its true start ([`ChunkParser::holds`]) is parsed again from it,
//! so errors name the file's first bad line. Lines end at `\n` (a `\r` before it dropped).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::MlError;

/// Where a chunk starts in its input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Start {
    /// Lines before the chunk.
    pub line: usize,
    /// Bytes before the chunk as the size checks count them (each line and its end).
    pub bytes: u64,
    /// Entries read before the chunk (Matrix Market, bag-of-words).
    pub entries: u64,
    /// Tokens read before the chunk (bag-of-words).
    pub tokens: u64,
    /// Whether the fields above are the true ones; `false`: a chunk parsed ahead, whose
    /// checks that need them are left to [`ChunkParser::holds`].
    pub exact: bool,
}

/// What parsing one chunk gave.
#[derive(Debug)]
pub(crate) struct Chunk<O> {
    /// The parsed values, up to the error if there is one.
    pub out: O,
    /// Lines read (through the last one parsed).
    pub lines: usize,
    /// Bytes read, as [`Start::bytes`] counts them.
    pub bytes: u64,
    /// Entries read.
    pub entries: u64,
    /// Tokens read.
    pub tokens: u64,
    /// Of a chunk parsed ahead: the largest [`super::limits::SizeRule::excess`] of its ids.
    pub excess: i128,
    /// The first error, which ended the chunk.
    pub error: Option<MlError>,
}

impl<O: Default> Chunk<O> {
    fn empty() -> Self {
        Chunk {
            out: O::default(),
            lines: 0,
            bytes: 0,
            entries: 0,
            tokens: 0,
            excess: i128::MIN,
            error: None,
        }
    }
}

/// One format's parser of a chunk of whole lines.
pub(crate) trait ChunkParser: Sync {
    /// The values of one chunk.
    type Out: Send + Default;

    /// Whether a chunk is delivered while later chunks are still being parsed: for a
    /// delivery that is a merge; a copy of large values beside the parsing slows both.
    const OVERLAP_DELIVERY: bool = false;

    /// Parses the lines of `text` from `start` through a [`LineCursor`], stopping at the
    /// first error.
    fn parse(&self, text: &str, start: Start, chunk: &mut Chunk<Self::Out>);

    /// Whether `chunk`, parsed ahead (from a zero start), holds at its true `start`: no
    /// check it left open fails there.
    fn holds(&self, chunk: &Chunk<Self::Out>, start: &Start) -> bool {
        let _ = (chunk, start);
        true
    }
}

/// Parses each line of `text` with `line(line, ascii, chunk)`, stopping at the first error.
#[inline]
pub(crate) fn parse_lines<O>(
    text: &str,
    chunk: &mut Chunk<O>,
    mut line: impl FnMut(&str, bool, &mut Chunk<O>) -> Result<(), MlError>,
) {
    let ascii = text.is_ascii();
    let mut lines = LineCursor::new(text);
    while let Some(next) = lines.next_line(chunk) {
        if let Err(e) = line(next, ascii, chunk) {
            chunk.error = Some(e);
            return;
        }
    }
}

/// The lines of a chunk, counting them and their bytes into the chunk.
pub(crate) struct LineCursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> LineCursor<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        LineCursor { text, pos: 0 }
    }

    /// The next line without its end (`\n` or `\r\n`), counted into `lines` and `bytes`.
    pub(crate) fn next_line<O>(&mut self, chunk: &mut Chunk<O>) -> Option<&'a str> {
        if self.pos >= self.text.len() {
            return None;
        }
        let rest = &self.text[self.pos..];
        let line = match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(end) => {
                self.pos += end + 1;
                let line = &rest[..end];
                line.strip_suffix('\r').unwrap_or(line)
            }
            None => {
                self.pos = self.text.len();
                rest
            }
        };
        chunk.lines += 1;
        chunk.bytes += line.len() as u64 + 1;
        Some(line)
    }
}

/// Whether `b` is whitespace to `char::is_whitespace` (for ASCII).
#[inline]
pub(crate) fn is_space(b: u8) -> bool {
    b == b' ' || (b'\t'..=b'\r').contains(&b)
}

/// `text` without leading and trailing whitespace: `str::trim`, faster on ASCII text.
#[inline]
pub(crate) fn trim(text: &str, ascii: bool) -> &str {
    if !ascii {
        return text.trim();
    }
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut end = bytes.len();
    while start < end && is_space(bytes[start]) {
        start += 1;
    }
    while end > start && is_space(bytes[end - 1]) {
        end -= 1;
    }
    &text[start..end]
}

/// The whitespace-separated words of a text: `str::split_whitespace`, faster on ASCII.
pub(crate) enum Words<'a> {
    /// ASCII text, split by byte.
    Ascii { text: &'a str, pos: usize },
    /// Any text.
    Unicode(std::str::SplitWhitespace<'a>),
}

/// The words of `text` when there are exactly three (`docID wordID count`, `row col
/// value`), else `None`.
pub(crate) fn three_words(text: &str, ascii: bool) -> Option<[&str; 3]> {
    let mut it = words(text, ascii);
    let three = [it.next()?, it.next()?, it.next()?];
    it.next().is_none().then_some(three)
}

/// The words of `text` (`ascii`: the text is known to be ASCII).
#[inline]
pub(crate) fn words(text: &str, ascii: bool) -> Words<'_> {
    if ascii {
        Words::Ascii { text, pos: 0 }
    } else {
        Words::Unicode(text.split_whitespace())
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        match self {
            Words::Unicode(split) => split.next(),
            Words::Ascii { text, pos } => {
                let bytes = text.as_bytes();
                let mut i = *pos;
                while i < bytes.len() && is_space(bytes[i]) {
                    i += 1;
                }
                if i == bytes.len() {
                    *pos = i;
                    return None;
                }
                let start = i;
                while i < bytes.len() && !is_space(bytes[i]) {
                    i += 1;
                }
                *pos = i;
                Some(&text[start..i])
            }
        }
    }
}

/// `text.parse::<f32>()`, read by `fast-float2`; what it refuses or reads as not finite is
/// left to the standard library.
#[inline]
pub(crate) fn parse_f32(text: &str) -> Option<f32> {
    let bytes = text.as_bytes();
    // Whole numbers of up to 7 digits (ratings, counts) are below 2^24, exact in an f32.
    if (1..=7).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit) {
        let whole = bytes.iter().fold(0, |v, &b| v * 10 + u32::from(b - b'0'));
        return Some(whole as f32);
    }
    match fast_float2::parse::<f32, _>(text) {
        Ok(v) if v.is_finite() => Some(v),
        _ => text.parse().ok(),
    }
}

/// `text.parse::<T>()` of an unsigned integer, read by `atoi`; anything else (a sign, an
/// overflow) is left to the standard library.
#[inline]
pub(crate) fn parse_uint<T>(text: &str) -> Option<T>
where
    T: atoi::FromRadix10Checked + std::str::FromStr,
{
    match T::from_radix_10_checked(text.as_bytes()) {
        (Some(v), used) if used == text.len() && used > 0 => Some(v),
        _ => text.parse().ok(),
    }
}

/// How an input is cut: chunks of about `chunk` bytes, parsed by `threads` threads a block
/// of about `block` bytes at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Split {
    pub chunk: usize,
    pub block: usize,
    pub threads: usize,
}

impl Split {
    /// 8 MiB chunks over every core, four chunks a thread per block (at least 64 MiB).
    pub(crate) fn current() -> Split {
        #[cfg(test)]
        if let Some(split) = TEST_SPLIT.with(|s| s.get()) {
            return split;
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = 8 << 20;
        Split {
            chunk,
            block: (chunk * threads * 4).max(64 << 20),
            threads,
        }
    }

    /// The threads an input of `bytes` bytes in memory is parsed on: one when its first
    /// block is a single chunk.
    pub(crate) fn threads_for(&self, bytes: u64) -> usize {
        let first = bytes.min(self.block as u64);
        let chunks =
            usize::try_from(first.div_ceil(self.chunk.max(1) as u64)).unwrap_or(usize::MAX);
        if chunks > 1 {
            self.threads.min(chunks)
        } else {
            1
        }
    }
}

#[cfg(test)]
thread_local! {
    /// A split tests force on the loaders they call.
    pub(crate) static TEST_SPLIT: std::cell::Cell<Option<Split>> = const { std::cell::Cell::new(None) };
}

/// An input handed over in line-aligned blocks.
pub(crate) trait Blocks {
    /// The next block of whole lines (the last may lack its `\n`); `None` at the end.
    fn next_block(&mut self) -> Result<Option<&[u8]>, MlError>;
    /// Puts back the last `n` bytes of the block just returned, to be returned again.
    fn give_back(&mut self, n: usize);
}

/// A whole input in memory (a mapped file), handed over a block at a time.
pub(crate) struct SliceBlocks<'a> {
    data: &'a [u8],
    pos: usize,
    block: usize,
}

impl<'a> SliceBlocks<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        SliceBlocks {
            data,
            pos: 0,
            block: Split::current().block,
        }
    }
}

impl Blocks for SliceBlocks<'_> {
    fn next_block(&mut self) -> Result<Option<&[u8]>, MlError> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let start = self.pos;
        let end = line_end_after(self.data, start + self.block);
        self.pos = end;
        Ok(Some(&self.data[start..end]))
    }

    fn give_back(&mut self, n: usize) {
        self.pos -= n;
    }
}

/// The end of the line that holds byte `at` (one past its `\n`), or the end of `data`.
fn line_end_after(data: &[u8], at: usize) -> usize {
    if at >= data.len() {
        return data.len();
    }
    memchr::memchr(b'\n', &data[at..]).map_or(data.len(), |i| at + i + 1)
}

/// A reader handed over in blocks of whole lines; a read error comes after the lines before it.
pub(crate) struct ReaderBlocks<R> {
    reader: R,
    name: PathBuf,
    buf: Vec<u8>,
    handed: usize,
    eof: bool,
    failed: Option<std::io::Error>,
    block: usize,
}

impl<R: Read> ReaderBlocks<R> {
    pub(crate) fn new(reader: R, name: &Path) -> Self {
        ReaderBlocks {
            reader,
            name: name.to_path_buf(),
            buf: Vec::new(),
            handed: 0,
            eof: false,
            failed: None,
            block: Split::current().block,
        }
    }
}

impl<R: Read> Blocks for ReaderBlocks<R> {
    fn next_block(&mut self) -> Result<Option<&[u8]>, MlError> {
        self.buf.drain(..self.handed);
        self.handed = 0;
        let end = loop {
            let done = self.eof || self.failed.is_some();
            if done || self.buf.len() >= self.block {
                if self.eof && self.failed.is_none() {
                    break self.buf.len();
                }
                let lines = memchr::memrchr(b'\n', &self.buf).map_or(0, |i| i + 1);
                if lines > 0 || done {
                    break lines;
                }
            }
            // Less than a block, or a line longer than a block: read on.
            match (&mut self.reader)
                .take(self.block as u64)
                .read_to_end(&mut self.buf)
            {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => self.failed = Some(e),
            }
        };
        if end == 0 {
            return match self.failed.take() {
                Some(e) => Err(MlError::io(&self.name, e)),
                None => Ok(None),
            };
        }
        self.handed = end;
        Ok(Some(&self.buf[..end]))
    }

    fn give_back(&mut self, n: usize) {
        self.handed -= n;
    }
}

/// The error `BufRead::lines` gave on a line that is not UTF-8.
fn not_utf8(name: &Path) -> MlError {
    MlError::io(
        name,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ),
    )
}

/// Parses one chunk of bytes from `start`; a line that is not UTF-8 ends it with the error
/// `BufRead::lines` gave.
fn parse_bytes<P: ChunkParser>(
    parser: &P,
    name: &Path,
    bytes: &[u8],
    start: Start,
) -> Chunk<P::Out> {
    let mut chunk = Chunk::empty();
    match std::str::from_utf8(bytes) {
        Ok(text) => parser.parse(text, start, &mut chunk),
        Err(e) => {
            let valid = &bytes[..e.valid_up_to()];
            let lines = memchr::memrchr(b'\n', valid).map_or(0, |i| i + 1);
            if let Ok(text) = std::str::from_utf8(&bytes[..lines]) {
                parser.parse(text, start, &mut chunk);
            }
            if chunk.error.is_none() {
                chunk.error = Some(not_utf8(name));
            }
        }
    }
    chunk
}

/// Cuts `block` into chunks of whole lines of about `size` bytes.
fn cut(block: &[u8], size: usize) -> Vec<&[u8]> {
    let mut chunks = Vec::with_capacity(block.len() / size.max(1) + 1);
    let mut pos = 0;
    while pos < block.len() {
        let end = line_end_after(block, pos + size.max(1) - 1);
        chunks.push(&block[pos..end]);
        pos = end;
    }
    chunks
}

/// Parses `chunks` from `start` (moved past them) and hands each chunk's values to `deliver`
/// in file order with its true start. With several threads the chunks are parsed ahead,
/// from a zero start, and delivered once all are parsed or, with
/// [`ChunkParser::OVERLAP_DELIVERY`], each as soon as it and those before it are.
fn parse_block<P: ChunkParser>(
    parser: &P,
    name: &Path,
    chunks: &[&[u8]],
    threads: usize,
    start: &mut Start,
    deliver: &mut impl FnMut(P::Out, &Start) -> Result<(), MlError>,
) -> Result<(), MlError> {
    let mut hand_on = |i: usize, ahead: Option<Chunk<P::Out>>| {
        let chunk = match ahead {
            Some(c) if c.error.is_none() && parser.holds(&c, start) => c,
            _ => parse_bytes(parser, name, chunks[i], *start),
        };
        let at = *start;
        start.line += chunk.lines;
        start.bytes += chunk.bytes;
        start.entries += chunk.entries;
        start.tokens += chunk.tokens;
        deliver(chunk.out, &at)?;
        chunk.error.map_or(Ok(()), Err)
    };
    if chunks.len() < 2 || threads < 2 {
        return (0..chunks.len()).try_for_each(|i| hand_on(i, None));
    }
    let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let (sender, parsed) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(chunks.len()))
            .map(|_| {
                let (sender, next, stop) = (sender.clone(), &next, &stop);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(bytes) = chunks.get(i) else { break };
                        let chunk = parse_bytes(parser, name, bytes, Start::default());
                        if sender.send((i, chunk)).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop(sender);
        let mut ahead: Vec<Option<Chunk<P::Out>>> = (0..chunks.len()).map(|_| None).collect();
        if !P::OVERLAP_DELIVERY {
            while let Ok((k, chunk)) = parsed.recv() {
                ahead[k] = Some(chunk);
            }
        }
        let delivered = (0..chunks.len()).try_for_each(|i| {
            // Once every worker is gone (one may have panicked), a missing chunk is parsed here.
            while ahead[i].is_none()
                && let Ok((k, chunk)) = parsed.recv()
            {
                ahead[k] = Some(chunk);
            }
            hand_on(i, ahead[i].take())
        });
        // After an error the chunks left are not needed.
        stop.store(true, Ordering::Relaxed);
        drop(parsed);
        for worker in workers {
            // A worker that panicked left its chunk to be parsed above.
            let _ = worker.join();
        }
        delivered
    })
}

/// Parses what `source` still holds from `start` and hands each chunk's values to
/// `deliver` in file order with its true start (then its error, if any); returns the start
/// after the last line.
pub(crate) fn parse_chunks<P: ChunkParser>(
    parser: &P,
    name: &Path,
    source: &mut dyn Blocks,
    mut start: Start,
    mut deliver: impl FnMut(P::Out, &Start) -> Result<(), MlError>,
) -> Result<Start, MlError> {
    let split = Split::current();
    start.exact = true;
    while let Some(block) = source.next_block()? {
        let chunks = cut(block, split.chunk);
        parse_block(
            parser,
            name,
            &chunks,
            split.threads,
            &mut start,
            &mut deliver,
        )?;
    }
    Ok(start)
}

/// Hands the lines of `source` to `each(line number, line, bytes through it)` from `start`
/// until it returns `false` (that line consumed) or the input ends; returns the start after.
pub(crate) fn each_line(
    name: &Path,
    source: &mut dyn Blocks,
    mut start: Start,
    mut each: impl FnMut(usize, &str, u64) -> Result<bool, MlError>,
) -> Result<Start, MlError> {
    while let Some(block) = source.next_block()? {
        let mut pos = 0;
        while pos < block.len() {
            let end = memchr::memchr(b'\n', &block[pos..]).map_or(block.len(), |i| pos + i + 1);
            let raw = &block[pos..end];
            pos = end;
            let raw = raw
                .strip_suffix(b"\n")
                .map_or(raw, |l| l.strip_suffix(b"\r").unwrap_or(l));
            let line = std::str::from_utf8(raw).map_err(|_| not_utf8(name))?;
            start.line += 1;
            start.bytes += line.len() as u64 + 1;
            if !each(start.line, line, start.bytes)? {
                let rest = block.len() - pos;
                source.give_back(rest);
                return Ok(start);
            }
        }
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_the_standard_library_reads_them() {
        let texts = [
            "0",
            "1",
            "-1",
            "+1",
            "1.",
            ".5",
            "-.5",
            "+.5",
            ".",
            "-",
            "+",
            "",
            "1e",
            "1e+",
            "1e5",
            "1E-5",
            "1.e5",
            ".e5",
            "e5",
            "inf",
            "-inf",
            "+inf",
            "Infinity",
            "infinit",
            "nan",
            "NaN",
            "-nan",
            "1x",
            "0x10",
            "1_0",
            " 1",
            "1 ",
            "3.4028236e38",
            "1e-46",
            "1.00000005960464477539062500000001",
            "00012",
            "--1",
            "1..2",
            "1e5.5",
            "123456789012345678901234567890",
            "7.006492321624086e-46",
            "9999999",
            "16777217",
            "0000000",
        ];
        for text in texts {
            let ours = parse_f32(text).map(f32::to_bits);
            let std = text.parse::<f32>().ok().map(f32::to_bits);
            assert_eq!(ours, std, "{text:?}");
            assert_eq!(
                parse_uint::<u64>(text),
                text.parse::<u64>().ok(),
                "{text:?}"
            );
        }
        assert_eq!(parse_uint::<u64>("18446744073709551616"), None);
        assert_eq!(parse_uint::<u64>("18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn ascii_words_and_trim_are_the_standard_ones() {
        for text in ["", " ", "a", " a b\t\tc \x0b d\x0c\re ", "a:b  c", "\t\n"] {
            let ours: Vec<_> = words(text, true).collect();
            let std: Vec<_> = text.split_whitespace().collect();
            assert_eq!(ours, std, "{text:?}");
            assert_eq!(trim(text, true), text.trim(), "{text:?}");
        }
    }

    #[test]
    fn an_input_is_parsed_on_as_many_threads_as_its_first_block_has_chunks() {
        let split = Split {
            chunk: 10,
            block: 40,
            threads: 3,
        };
        let threads: Vec<_> = [0, 5, 10, 11, 25, 1000]
            .map(|bytes| split.threads_for(bytes))
            .into();
        assert_eq!(threads, [1, 1, 1, 2, 3, 3]);
    }

    proptest::proptest! {
        #[test]
        fn random_numbers_read_as_the_standard_library_reads_them(
            text in "[-+]?[0-9]{0,12}(\\.[0-9]{0,12})?([eE][-+]?[0-9]{0,3})?",
            other in "[0-9eE.+\\-a-z]{0,10}",
        ) {
            for t in [&text, &other] {
                let ours = parse_f32(t).map(f32::to_bits);
                let std = t.parse::<f32>().ok().map(f32::to_bits);
                proptest::prop_assert_eq!(ours, std, "{:?}", t);
                proptest::prop_assert_eq!(parse_uint::<u64>(t), t.parse::<u64>().ok());
            }
        }
    }
}
