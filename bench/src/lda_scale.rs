//! `petrel bench lda-scale`: STRADS LDA (SparseLDA with word rotation) on corpora of
//! growing size, per worker count: sampling throughput per core against the corpus size,
//! and the speed-up over one worker. Only the number of documents grows (fixed vocabulary,
//! topics and document length), so tokens/s per core should stay flat.

use crate::scale::{GridArgs, grid, per_core, write_plot};
use petrel::CliError;
use petrel::train::plot::absolute;
use petrel::train::{NodeMemory, run_job};
use petrel_strads::StradsError;
use petrel_strads::apps::lda::{LdaApp, LdaSettings};
use petrel_strads::kit::StradsSettings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `petrel bench lda-scale` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct LdaScaleBenchArgs {
    /// Corpus sizes in tokens, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,10000000,50000000"
    )]
    pub tokens: Vec<usize>,
    /// The worker counts, transport and round timeout.
    #[command(flatten)]
    pub grid: GridArgs,
    /// Topics (of the generating model and of the fit).
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    /// Vocabulary size.
    #[arg(long, default_value_t = 10000)]
    pub vocab: usize,
    /// Tokens per document (the corpus grows by its number of documents).
    #[arg(long, default_value_t = 100)]
    pub doc_length: usize,
    /// Passes over the corpus.
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
    /// Output directory (each run's files and the plot).
    #[arg(long, default_value = "target/bench-lda-scale")]
    pub out: PathBuf,
}

/// One run: a corpus size and a worker count. `tokens_per_s` is all workers'; per core is
/// per worker (one sampling thread each); `wall_s` includes cluster start and generation.
#[derive(Debug, Clone, Serialize)]
pub struct LdaScaleRun {
    pub workers: usize,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_core: f64,
    pub ns_per_token_per_core: f64,
    pub sampling_s: f64,
    pub wall_s: f64,
    pub final_loglik_per_token: f64,
    #[serde(flatten)]
    pub memory: NodeMemory,
}

/// What one of `workers` workers holds, MB, from the sampler's structures: 16 bytes a token
/// of its share, at most `min(topics, length)` 8-byte `(topic, count)` pairs a document,
/// and the whole word-topic table (4 bytes a count) as an upper bound.
fn worker_holds_mb(tokens: usize, docs: usize, vocab: usize, topics: usize, workers: usize) -> f64 {
    let w = workers.max(1) as f64;
    let token_bytes = tokens as f64 / w * 16.0;
    let doc_length = tokens as f64 / docs.max(1) as f64;
    let doc_topic_bytes = docs as f64 / w * (topics as f64).min(doc_length) * 8.0;
    let word_topic_bytes = vocab as f64 * topics as f64 * 4.0;
    (token_bytes + doc_topic_bytes + word_topic_bytes) / (1024.0 * 1024.0)
}

/// One corpus size; `speedup`: tokens/s of the largest worker count over one worker's.
#[derive(Debug, Clone, Serialize)]
pub struct LdaScaleSize {
    pub tokens: usize,
    pub docs: usize,
    pub per_workers: BTreeMap<usize, LdaScaleRun>,
    pub speedup: Option<f64>,
}

/// The bench's JSON line; `per_core_spread`: per worker count, slowest over fastest time
/// per token per core across the sizes.
#[derive(Debug, Serialize)]
pub struct LdaScaleFigures {
    pub bench: &'static str,
    pub topics: usize,
    pub vocab: usize,
    pub doc_length: usize,
    pub iterations: usize,
    pub transport: String,
    pub sizes: Vec<LdaScaleSize>,
    pub per_core_spread: BTreeMap<usize, f64>,
    pub plot: String,
}

/// Runs the bench, prints its table and JSON line.
pub fn run(args: LdaScaleBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&measure(&args)?)
}

/// Runs every size and worker count, prints the table and writes the plot.
pub fn measure(args: &LdaScaleBenchArgs) -> Result<LdaScaleFigures, CliError> {
    if args.doc_length == 0 || args.tokens.iter().any(|&t| t < args.doc_length) {
        return Err(CliError::Usage(
            "--doc-length must be positive and every --tokens size at least one document".into(),
        ));
    }
    let out = absolute(&args.out)?;
    let runs = grid(
        &args.tokens,
        &args.grid.workers,
        "tokens workers tokens_per_s tokens_per_s_per_core ns_per_token_per_core sampling_s \
         wall_s final_loglik_per_token worker_rss_mb worker_holds_mb worker_rss_over_holds \
         worker_heap_over_holds scheduler_rss_mb",
        |&tokens, workers| run_one(args, &out, tokens, workers),
    )?;
    let sizes: Vec<LdaScaleSize> = args
        .tokens
        .iter()
        .zip(runs)
        .map(|(&tokens, runs)| {
            let docs = tokens / args.doc_length;
            let per_workers: BTreeMap<usize, LdaScaleRun> =
                runs.into_iter().map(|r| (r.workers, r)).collect();
            let speedup = match (per_workers.get(&1), per_workers.last_key_value()) {
                (Some(one), Some((_, most))) if most.workers > 1 && one.tokens_per_s > 0.0 => {
                    Some(most.tokens_per_s / one.tokens_per_s)
                }
                _ => None,
            };
            LdaScaleSize {
                tokens: docs * args.doc_length,
                docs,
                per_workers,
                speedup,
            }
        })
        .collect();
    let (per_core_spread, series) = per_core(&args.grid.workers, |workers| {
        sizes
            .iter()
            .filter_map(|s| {
                Some((
                    s.tokens as f64,
                    s.per_workers.get(&workers)?.ns_per_token_per_core,
                ))
            })
            .filter(|p| p.1.is_finite())
            .collect()
    });
    for s in &sizes {
        if let Some(speedup) = s.speedup {
            println!(
                "{} tokens: speed-up over one worker {speedup:.2}x",
                s.tokens
            );
        }
    }
    let plot = write_plot(
        &out.join("lda_scale_ns_per_token.svg"),
        "LDA (word rotation): sampling time per token per core against corpus size",
        "tokens",
        "ns per token per core",
        &series,
        false,
    )?;
    Ok(LdaScaleFigures {
        bench: "lda-scale",
        topics: args.topics,
        vocab: args.vocab,
        doc_length: args.doc_length,
        iterations: args.iterations,
        transport: crate::common::name_of(&args.grid.transport),
        sizes,
        per_core_spread,
        plot,
    })
}

/// One run: a corpus of about `tokens` tokens on `workers` workers, and its table row.
fn run_one(
    args: &LdaScaleBenchArgs,
    out: &Path,
    tokens: usize,
    workers: usize,
) -> Result<(LdaScaleRun, serde_json::Value), CliError> {
    let docs = tokens / args.doc_length;
    let job = LdaSettings {
        synthetic: crate::lda::corpus(args.topics, args.vocab, docs, args.doc_length),
        n_topics: args.topics,
        iterations: args.iterations,
        timeout_s: args.grid.timeout_s,
        out_dir: Some(out.join(format!("t{tokens}-p{workers}"))),
        ..LdaSettings::default()
    };
    job.validate().map_err(StradsError::from)?;
    let started = Instant::now();
    let m = run_job::<LdaApp>(&job, workers, args.grid.transport)?;
    let wall_s = started.elapsed().as_secs_f64();
    let holds = worker_holds_mb(m.n_tokens, docs, args.vocab, args.topics, workers);
    let memory = NodeMemory::of_run(job.out_dir.as_deref(), args.grid.transport, holds);
    let tokens_per_s = m.tokens_per_s_per_worker * workers as f64;
    let ns_per_token_per_core = if m.tokens_sampled > 0 {
        1e9 * m.sampling_s * workers as f64 / m.tokens_sampled as f64
    } else {
        f64::NAN
    };
    let run = LdaScaleRun {
        workers,
        tokens_per_s,
        tokens_per_s_per_core: m.tokens_per_s_per_worker,
        ns_per_token_per_core,
        sampling_s: m.sampling_s,
        wall_s,
        final_loglik_per_token: m.final_loglik_per_token,
        memory,
    };
    let mut row = serde_json::to_value(&run).unwrap_or_default();
    row["tokens"] = m.n_tokens.into();
    Ok((run, row))
}
