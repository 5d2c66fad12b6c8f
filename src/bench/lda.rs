//! `petrel bench lda`: collapsed Gibbs sampling (SparseLDA) with word rotation on the
//! STRADS runtime, on a corpus sampled from the LDA generative model, for several worker
//! counts side by side: sampling throughput and log-likelihood per token against time.
//! (No data-parallel parameter-server LDA to compare with on this branch.)

use crate::bench::strads_plot::{Series, line_plot};
use crate::report::{Table, print_json};
use crate::strads::run_lda_job;
use petrel_algorithms::apps::lda::{LdaJob, LdaMetrics, SyntheticCorpus};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    #[arg(long, default_value_t = 5000)]
    pub vocab: usize,
    #[arg(long, default_value_t = 10000)]
    pub docs: usize,
    #[arg(long, default_value_t = 100)]
    pub doc_length: usize,
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Worker counts to compare (the JSON reports the last one).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// memory | quic
    #[arg(long, default_value = "quic")]
    pub transport: String,
    #[arg(long, default_value = "target/bench-lda")]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Figures {
    bench: &'static str,
    docs: usize,
    vocab: usize,
    tokens: usize,
    topics: usize,
    workers: usize,
    iterations: usize,
    tokens_per_s_per_core: f64,
    final_loglik_per_token: f64,
    initial_loglik_per_token: f64,
    sampling_s: f64,
    single_worker_tokens_per_s: Option<f64>,
    plot: String,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.workers.is_empty() {
        return Err("--workers needs at least one count".into());
    }
    let out = std::path::absolute(&args.out).map_err(|e| e.to_string())?;
    let mut table = Table::new(&[
        "workers",
        "tokens/s",
        "tokens/s per worker",
        "sampling (s)",
        "initial ll/token",
        "final ll/token",
    ]);
    let mut runs: Vec<(usize, LdaMetrics)> = Vec::new();
    for &p in &args.workers {
        let job = LdaJob {
            synthetic: SyntheticCorpus {
                n_topics: args.topics,
                vocab_size: args.vocab,
                n_docs: args.docs,
                doc_length: args.doc_length,
                alpha: 0.1,
                beta: 0.1,
                seed: 42,
            },
            n_topics: args.topics,
            iterations: args.iterations,
            out_dir: Some(out.join(format!("p{p}"))),
            ..LdaJob::default()
        };
        let m = run_lda_job(&job, p, &args.transport)?;
        table.row(vec![
            p.to_string(),
            format!("{:.0}", m.tokens_per_s_per_worker * p as f64),
            format!("{:.0}", m.tokens_per_s_per_worker),
            format!("{:.2}", m.sampling_s),
            format!(
                "{:.4}",
                m.loglik.first().map_or(f64::NAN, |l| l.loglik_per_token)
            ),
            format!("{:.4}", m.final_loglik_per_token),
        ]);
        runs.push((p, m));
    }
    table.print();
    let plot = out.join("lda_loglik_vs_time.svg");
    let series: Vec<Series> = runs
        .iter()
        .map(|(p, m)| Series {
            name: format!("{p} worker(s)"),
            points: m
                .loglik
                .iter()
                .map(|l| (l.elapsed_s, l.loglik_per_token))
                .collect(),
        })
        .collect();
    line_plot(
        &plot,
        "STRADS LDA (word rotation): log-likelihood per token against time",
        "seconds",
        "log-likelihood per token",
        &series,
        false,
    )?;
    println!("plot: {}", plot.display());
    let (p, last) = runs.last().ok_or("no runs")?;
    let single = runs
        .iter()
        .find(|(p, _)| *p == 1)
        .map(|(_, m)| m.tokens_per_s_per_worker);
    print_json(&Figures {
        bench: "lda",
        docs: last.n_docs,
        vocab: last.vocab_size,
        tokens: last.n_tokens,
        topics: last.n_topics,
        workers: *p,
        iterations: last.iterations,
        tokens_per_s_per_core: last.tokens_per_s_per_worker,
        final_loglik_per_token: last.final_loglik_per_token,
        initial_loglik_per_token: last.loglik.first().map_or(f64::NAN, |l| l.loglik_per_token),
        sampling_s: last.sampling_s,
        single_worker_tokens_per_s: single,
        plot: plot.display().to_string(),
    })
    .map_err(|e| e.to_string())
}
