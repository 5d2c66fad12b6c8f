//! `petrel bench load`: how fast petrel reads a LIBSVM, a ratings and a bag-of-words file of
//! about `--mb` MB each (or a LIBSVM `--file`), cold (parsed) and from the binary cache.
//! MB/s are 10^6 bytes of text a second; the file is read once before each timing. A cold
//! parse's MB/s per core divides it by the threads the loader parses that file on.

use crate::BenchError;
use petrel::report::{Table, fmt, print_json};
use petrel_ml::data::{cache, load_bow, load_libsvm, load_ratings, parse_threads};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `petrel bench load`.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadBenchArgs {
    /// Size of each generated file, MB.
    #[arg(long, default_value_t = 100)]
    pub mb: usize,
    /// A LIBSVM file to read instead of the generated one (its binary cache is written next
    /// to it).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Timed loads of each kind; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

/// The JSON line: each cold parse's MB/s in all and per parsing thread, the threads, the
/// cache's MB/s over all three files, the cores.
#[derive(Debug, Serialize)]
struct LoadFigures {
    libsvm_mb_per_s: f64,
    ratings_mb_per_s: f64,
    bow_mb_per_s: f64,
    libsvm_mb_per_s_per_core: f64,
    ratings_mb_per_s_per_core: f64,
    bow_mb_per_s_per_core: f64,
    parse_threads: [usize; 3],
    cache_mb_per_s: f64,
    cores: usize,
}

/// Writes the three files of about `mb` MB each into `dir`.
fn generate(dir: &Path, mb: usize) -> Result<[PathBuf; 3], BenchError> {
    let target = mb << 20;
    // Seeded: the files are the same on every run.
    let mut rng = StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    let paths = [
        dir.join("data.svm"),
        dir.join("ratings.tsv"),
        dir.join("docword.txt"),
    ];
    // LIBSVM: rows of up to 400 increasing indices below 10^6.
    write_lines(&paths[0], target, || {
        let label: f64 = rng.gen_range(-10.0..10.0);
        let mut line = format!("{label:.4}");
        let mut idx = 0;
        for _ in 0..400 {
            idx += 1 + rng.gen_range(0..4999u64);
            if idx > 1_000_000 {
                break;
            }
            let v: f64 = rng.gen_range(-1.0..1.0);
            line.push_str(&format!(" {idx}:{v:.6}"));
        }
        line + "\n"
    })?;
    // Ratings: user, item, rating.
    write_lines(&paths[1], target, || {
        let (u, i) = (rng.gen_range(0..500_000u64), rng.gen_range(0..20_000u64));
        format!("{u}\t{i}\t{}\n", 1 + rng.gen_range(0..5u64))
    })?;
    // Bag of words: documents of up to 100 increasing word ids below 10^5, after a header.
    let mut body = String::with_capacity(target + 64);
    let (mut nnz, mut doc) = (0u64, 1u64);
    while body.len() < target {
        let mut word = 0;
        for _ in 0..100 {
            word += 1 + rng.gen_range(0..1000u64);
            if word > 100_000 {
                break;
            }
            body.push_str(&format!("{doc} {word} {}\n", 1 + rng.gen_range(0..5u64)));
            nnz += 1;
        }
        doc += 1;
    }
    let text = format!("{}\n100000\n{nnz}\n{body}", doc - 1);
    std::fs::write(&paths[2], text).map_err(BenchError::io("write bag of words"))?;
    Ok(paths)
}

/// Writes lines from `line` to `path` until at least `target` bytes.
fn write_lines(
    path: &Path,
    target: usize,
    mut line: impl FnMut() -> String,
) -> Result<(), BenchError> {
    let mut write = || -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut written = 0;
        while written < target {
            let l = line();
            written += l.len();
            w.write_all(l.as_bytes())?;
        }
        w.flush()
    };
    write().map_err(BenchError::io(format!("write {}", path.display())))
}

/// Loads `path` as `kind` once, returning seconds.
fn load_once(kind: usize, path: &Path) -> Result<f64, BenchError> {
    std::hint::black_box(
        std::fs::read(path).map_err(BenchError::io(format!("read {}", path.display())))?,
    );
    // Dropped after the timing: what is timed is what a loader waits for.
    let started = Instant::now();
    let loaded: Box<dyn std::any::Any> = match kind {
        0 => Box::new(load_libsvm(path)?),
        1 => Box::new(load_ratings(path)?),
        _ => Box::new(load_bow(path, None)?),
    };
    let secs = started.elapsed().as_secs_f64();
    drop(std::hint::black_box(loaded));
    Ok(secs)
}

fn best(repeat: usize, mut f: impl FnMut() -> Result<f64, BenchError>) -> Result<f64, BenchError> {
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        best = best.min(f()?);
    }
    Ok(best)
}

/// Runs the bench.
pub fn run(args: LoadBenchArgs) -> Result<(), BenchError> {
    let (table, figures) = measure(&args)?;
    table.print();
    Ok(print_json(&figures)?)
}

/// Times the loads: the table and the JSON line's figures.
fn measure(args: &LoadBenchArgs) -> Result<(Table, LoadFigures), BenchError> {
    let dir = tempfile::tempdir().map_err(BenchError::io("make a temporary directory"))?;
    eprintln!(
        "generating 3 files of {} MB in {}",
        args.mb,
        dir.path().display()
    );
    let mut paths = generate(dir.path(), args.mb)?;
    if let Some(file) = &args.file {
        paths[0] = file.clone();
    }
    let names = ["LIBSVM", "ratings (TSV)", "bag of words"];
    let mut table = Table::new(&[
        "format",
        "MB",
        "cold s",
        "cold MB/s",
        "threads",
        "cold MB/s/core",
        "cached s",
        "cached MB/s",
    ]);
    let (mut cold, mut cached_bytes, mut cached_secs) = ([0.0; 3], 0.0, 0.0);
    let mut threads = [1; 3];
    for (kind, path) in paths.iter().enumerate() {
        let bytes = std::fs::metadata(path)
            .map_err(BenchError::io(format!("stat {}", path.display())))?
            .len();
        let mb = bytes as f64 / 1e6;
        threads[kind] = parse_threads(bytes);
        cache::set_disk_cache(Some(false));
        let cold_s = best(args.repeat, || load_once(kind, path))?;
        cache::set_disk_cache(Some(true));
        // The first load writes the cache; the timed ones read it.
        load_once(kind, path)?;
        let cached_s = best(args.repeat, || load_once(kind, path))?;
        cache::set_disk_cache(None);
        cold[kind] = mb / cold_s;
        cached_bytes += mb;
        cached_secs += cached_s;
        table.row(vec![
            names[kind].into(),
            fmt(mb),
            fmt(cold_s),
            fmt(mb / cold_s),
            threads[kind].to_string(),
            fmt(mb / cold_s / threads[kind] as f64),
            fmt(cached_s),
            fmt(mb / cached_s),
        ]);
    }
    if let Some(file) = &args.file {
        // Leave the user's directory as it was.
        let _ = std::fs::remove_file(cache::cache_path(file));
    }
    let figures = LoadFigures {
        libsvm_mb_per_s: cold[0],
        ratings_mb_per_s: cold[1],
        bow_mb_per_s: cold[2],
        libsvm_mb_per_s_per_core: cold[0] / threads[0] as f64,
        ratings_mb_per_s_per_core: cold[1] / threads[1] as f64,
        bow_mb_per_s_per_core: cold[2] / threads[2] as f64,
        parse_threads: threads,
        cache_mb_per_s: cached_bytes / cached_secs,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok((table, figures))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_is_timed_in_all_and_per_parsing_thread() {
        let args = LoadBenchArgs {
            mb: 1,
            file: None,
            repeat: 1,
        };
        let (_, f) = measure(&args).unwrap();
        let all = [f.libsvm_mb_per_s, f.ratings_mb_per_s, f.bow_mb_per_s];
        let per_core = [
            f.libsvm_mb_per_s_per_core,
            f.ratings_mb_per_s_per_core,
            f.bow_mb_per_s_per_core,
        ];
        for k in 0..3 {
            // A 1 MB file is a single chunk: parsed on one thread.
            assert_eq!(f.parse_threads[k], 1, "{f:?}");
            assert!(all[k] > 0.0 && all[k].is_finite(), "{f:?}");
            assert_eq!(per_core[k], all[k] / f.parse_threads[k] as f64, "{f:?}");
        }
        assert!(f.cache_mb_per_s > 0.0 && f.cores >= 1, "{f:?}");
    }
}
