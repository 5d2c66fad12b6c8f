//! `petrel bench lda`: collapsed Gibbs sampling (SparseLDA) with word rotation on the
//! STRADS runtime, on a corpus sampled from the LDA generative model, for several worker
//! counts side by side, and data-parallel LDA on the parameter server (SSP, the YahooLDA /
//! Bösen design the STRADS paper compared against) with the last worker count on the same
//! corpus, topics and iterations: sampling throughput and log-likelihood per token against
//! time (both measured from the end of initialisation).

use crate::scale::{WorkerCountsArgs, write_plot};
use petrel::CliError;
use petrel::train::plot::{Series, absolute};
use petrel::train::run_job;
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_ml::topic::{LdaMetrics, LoglikPoint};
use petrel_ps::apps::lda::{PsLdaMetrics, PsLdaSettings};
use petrel_strads::apps::lda::{LdaApp, LdaSettings};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct LdaBenchArgs {
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
    #[command(flatten)]
    pub runs: WorkerCountsArgs,
    #[arg(long, default_value = "target/bench-lda")]
    pub out: PathBuf,
    /// PS-LDA: SSP staleness bound of the word-topic table.
    #[arg(long, default_value_t = 1)]
    pub staleness: u32,
    /// PS-LDA: server shards.
    #[arg(long, default_value_t = 2)]
    pub ps_shards: usize,
    /// PS-LDA: clocks per pass over a worker's documents.
    #[arg(long, default_value_t = 1)]
    pub ps_clocks_per_iteration: u32,
    /// Skip the PS-LDA run (word rotation only).
    #[arg(long)]
    pub no_ps: bool,
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
    #[serde(flatten)]
    ps: Option<PsFigures>,
}

/// The PS-LDA figures and the comparison with word rotation (same worker count).
#[derive(Serialize)]
struct PsFigures {
    ps_tokens_per_s_per_core: f64,
    ps_final_loglik_per_token: f64,
    ps_initial_loglik_per_token: f64,
    ps_sampling_s: f64,
    ps_staleness: Option<u32>,
    ps_shards: u32,
    ps_clocks_per_iteration: u32,
    ps_mean_read_staleness: f64,
    /// Rotation's final log-likelihood per token minus PS-LDA's (> 0: rotation is better).
    rotation_vs_ps_loglik_gap: f64,
    /// Rotation's tokens/s per core divided by PS-LDA's.
    rotation_vs_ps_throughput: f64,
    /// The lower of the two final log-likelihoods per token; both runs reach it.
    target_loglik_per_token: f64,
    rotation_time_to_target_s: Option<f64>,
    ps_time_to_target_s: Option<f64>,
    /// PS time to target divided by rotation's (> 1: rotation converges faster).
    rotation_vs_ps_time_to_target: Option<f64>,
}

/// Seconds (since the end of initialisation) until the curve first reaches `target`.
fn time_to(points: &[LoglikPoint], target: f64) -> Option<f64> {
    let t0 = points.first()?.elapsed_s;
    points
        .iter()
        .find(|p| p.loglik_per_token >= target - 1e-9)
        .map(|p| p.elapsed_s - t0)
}

/// The synthetic corpus of the LDA benches (alpha = beta = 0.1, seed 42).
pub(crate) fn corpus(
    topics: usize,
    vocab: usize,
    docs: usize,
    doc_length: usize,
) -> LdaCorpusParams {
    LdaCorpusParams {
        n_topics: topics,
        vocab_size: vocab,
        n_docs: docs,
        doc_length,
        alpha: 0.1,
        beta: 0.1,
        seed: 42,
    }
}

pub fn run(args: LdaBenchArgs) -> Result<(), CliError> {
    let out = absolute(&args.out)?;
    let runs = args.runs.run_each(|p| {
        let job = LdaSettings {
            synthetic: corpus(args.topics, args.vocab, args.docs, args.doc_length),
            n_topics: args.topics,
            iterations: args.iterations,
            out_dir: Some(out.join(format!("p{p}"))),
            ..LdaSettings::default()
        };
        run_job::<LdaApp>(&job, p, args.runs.transport)
    })?;
    let mut table: Vec<_> = (runs.iter())
        .map(|(p, m)| row("rotation".into(), *p, m))
        .collect();
    let (p, last) = runs
        .last()
        .ok_or_else(|| CliError::Usage("no runs".into()))?;
    let ps = if args.no_ps {
        None
    } else {
        let m = run_ps(&args, *p, &out)?;
        table.push(row(format!("ps ssp s={}", args.staleness), *p, &m.lda));
        Some(m)
    };
    let keys = "system workers tokens_per_s tokens_per_s_per_worker sampling_s initial_loglik_per_token \
                final_loglik_per_token";
    crate::common::json_table(&table, keys).print();
    let plot = plot_loglik(&args, &out, &runs, ps.as_ref())?;
    let single = runs
        .iter()
        .find(|(p, _)| *p == 1)
        .map(|(_, m)| m.tokens_per_s_per_worker);
    let ps = ps.map(|m| ps_figures(&m, last));
    crate::scale::print_figures(&Figures {
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
        plot,
        ps,
    })
}

/// A run's table row: `system` on `p` workers.
fn row(system: String, p: usize, m: &LdaMetrics) -> serde_json::Value {
    let initial = m.loglik.first().map(|l| l.loglik_per_token);
    serde_json::json!({
        "system": system, "workers": p, "tokens_per_s": m.tokens_per_s_per_worker * p as f64,
        "tokens_per_s_per_worker": m.tokens_per_s_per_worker, "sampling_s": m.sampling_s,
        "initial_loglik_per_token": initial, "final_loglik_per_token": m.final_loglik_per_token,
    })
}

/// Plots every run's log-likelihood per token against time (each curve from its own
/// first point). Returns the plot's path.
fn plot_loglik(
    args: &LdaBenchArgs,
    out: &Path,
    runs: &[(usize, LdaMetrics)],
    ps: Option<&PsLdaMetrics>,
) -> Result<String, CliError> {
    let curve = |points: &[LoglikPoint]| -> Vec<(f64, f64)> {
        let t0 = points.first().map_or(0.0, |p| p.elapsed_s);
        points
            .iter()
            .map(|l| (l.elapsed_s - t0, l.loglik_per_token))
            .collect()
    };
    let mut series: Vec<Series> = runs
        .iter()
        .map(|(p, m)| Series {
            name: format!("rotation, {p} worker(s)"),
            points: curve(&m.loglik),
        })
        .collect();
    if let Some(m) = ps {
        series.push(Series {
            name: format!(
                "parameter server (SSP s={}), {} workers",
                args.staleness, m.lda.workers
            ),
            points: curve(&m.lda.loglik),
        });
    }
    write_plot(
        &out.join("lda_loglik_vs_time.svg"),
        "LDA: word rotation (STRADS) vs data-parallel PS: log-likelihood per token against time",
        "seconds",
        "log-likelihood per token",
        &series,
        false,
    )
}

/// The PS run's figures against the largest rotation run `last`: throughput, final
/// log-likelihood and the time each took to the worse of the two final values.
fn ps_figures(m: &PsLdaMetrics, last: &LdaMetrics) -> PsFigures {
    let target = m
        .lda
        .final_loglik_per_token
        .min(last.final_loglik_per_token);
    let (rot_t, ps_t) = (
        time_to(&last.loglik, target),
        time_to(&m.lda.loglik, target),
    );
    PsFigures {
        ps_tokens_per_s_per_core: m.lda.tokens_per_s_per_worker,
        ps_final_loglik_per_token: m.lda.final_loglik_per_token,
        ps_initial_loglik_per_token: m
            .lda
            .loglik
            .first()
            .map_or(f64::NAN, |l| l.loglik_per_token),
        ps_sampling_s: m.lda.sampling_s,
        ps_staleness: m.staleness,
        ps_shards: m.shards,
        ps_clocks_per_iteration: m.clocks_per_iteration,
        ps_mean_read_staleness: m.read_staleness.mean,
        rotation_vs_ps_loglik_gap: last.final_loglik_per_token - m.lda.final_loglik_per_token,
        rotation_vs_ps_throughput: last.tokens_per_s_per_worker / m.lda.tokens_per_s_per_worker,
        target_loglik_per_token: target,
        rotation_time_to_target_s: rot_t,
        ps_time_to_target_s: ps_t,
        rotation_vs_ps_time_to_target: crate::common::ratio(ps_t, rot_t),
    }
}

/// PS-LDA on the same corpus, topics and iterations as the rotation runs.
fn run_ps(
    args: &LdaBenchArgs,
    workers: usize,
    out: &std::path::Path,
) -> Result<PsLdaMetrics, CliError> {
    let cfg = PsLdaSettings {
        synthetic: corpus(args.topics, args.vocab, args.docs, args.doc_length),
        n_topics: args.topics,
        iterations: args.iterations,
        consistency: petrel_ps::ConsistencyModel::Ssp,
        staleness: args.staleness,
        clocks_per_iteration: args.ps_clocks_per_iteration,
        files: petrel_ps::kit::settings::RunFiles {
            out: Some(out.join(format!("ps-p{workers}"))),
            ..Default::default()
        },
        ..PsLdaSettings::default()
    };
    let transport = args.runs.transport.cluster_transport();
    petrel_ps::run_local::<petrel_ps::PsLda>(cfg, args.ps_shards, workers, transport)
        .map(|o| o.metrics)
        .map_err(|e| CliError::ParameterServer(Box::new(e)))
}
