//! ps-lda's settings: the flags of `petrel train ps-lda` and `[app.ps_lda]`, their checks and the metrics format.

use super::*;

/// The settings of ps-lda: `[app.ps_lda]` in TOML and the flags of `petrel train ps-lda`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default, deny_unknown_fields, remote = "Self")]
pub struct PsLdaSettings {
    /// UCI bag-of-words docword file (`D`, `W`, `NNZ` header, then `doc word count`).
    /// Without it: a corpus sampled from the LDA generative model (`synthetic`).
    #[arg(long)]
    pub docword: Option<PathBuf>,
    /// Held-out docword file (same vocabulary): when training ends, its perplexity by
    /// document completion goes to metrics.json as `heldout_*`.
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// UCI vocab file (one word per line) for readable topics.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// The synthetic corpus (settings only).
    #[arg(skip)]
    pub synthetic: LdaCorpusParams,
    /// Topics.
    #[arg(long = "topics", default_value_t = 20)]
    pub n_topics: usize,
    /// Document-topic prior.
    #[arg(long, default_value_t = 0.1)]
    pub alpha: f64,
    /// Topic-word prior.
    #[arg(long, default_value_t = 0.1)]
    pub beta: f64,
    /// Passes over the corpus.
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Seed of the initial assignments and the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Words per topic in topics.txt.
    #[arg(long, default_value_t = 10)]
    pub top_words: usize,
    /// Consistency model of the word-topic table.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 1)]
    pub staleness: u32,
    /// Clocks per pass over a worker's documents (each samples `1 / clocks_per_iteration`).
    #[arg(long, default_value_t = 1)]
    pub clocks_per_iteration: u32,
    /// Tokens sampled between yields to the node's event loop.
    #[arg(long, default_value_t = 20_000)]
    pub chunk_tokens: usize,
    /// Managed communication.
    #[command(flatten)]
    #[serde(flatten)]
    pub comm: ManagedSettings,
    /// Output and checkpoint files.
    #[command(flatten)]
    #[serde(flatten)]
    pub files: RunFiles,
    /// Clocks between two checkpoints (0 = never write). Clock 0 holds the initial counts,
    /// then `clocks_per_iteration` clocks per pass.
    #[arg(long, default_value_t = 5)]
    pub checkpoint_every: u64,
}

crate::kit::settings::flat_settings!(PsLdaSettings);

impl PsLdaSettings {
    /// Every value in range (keys as in `[app.ps_lda]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.docword.is_none() {
            self.synthetic.check("synthetic.", &mut c);
        }
        c.at_least("n_topics", self.n_topics, 1);
        c.positive("alpha", self.alpha);
        c.positive("beta", self.beta);
        c.at_least("iterations", self.iterations, 1);
        c.at_least("top_words", self.top_words, 1);
        c.at_least("clocks_per_iteration", self.clocks_per_iteration, 1);
        c.at_least("chunk_tokens", self.chunk_tokens, 1);
        self.comm.check(&mut c);
        c.finish()
    }

    /// The word-topic table's consistency.
    pub fn consistency(&self) -> Consistency {
        Consistency::new(self.consistency, self.staleness)
    }

    /// The one sparse table `word_topic`.
    pub fn tables(&self) -> Result<Vec<TableSpec>, PsError> {
        Ok(TablesBuilder::new()
            .sparse("word_topic", self.consistency())
            .build()?)
    }

    /// Loads the corpus and checks it fits exact `f32` counts.
    pub fn load(&self) -> Result<Corpus, PsError> {
        let corpus = load_corpus(
            self.docword.as_deref(),
            self.vocab.as_deref(),
            &self.synthetic,
        )?;
        let docs = corpus.docs.iter().map(Vec::as_slice);
        check_corpus(corpus.n_tokens(), corpus.vocab_size, docs)?;
        Ok(corpus)
    }

    pub(super) fn lda_config(&self, workers: usize) -> LdaConfig {
        LdaConfig {
            n_topics: self.n_topics,
            alpha: self.alpha,
            beta: self.beta,
            n_workers: workers,
            iterations: self.iterations,
            seed: self.seed,
        }
    }
}

/// The metrics of a ps-lda run: a record per pass (log-likelihood per token).
pub fn ps_lda_run_metrics(
    metrics: &PsLdaMetrics,
    cfg: &PsLdaSettings,
) -> petrel_ml::job::RunMetrics {
    let lda = &metrics.lda;
    let mut m = petrel_ml::job::RunMetrics::new(PsLda::NAME, cfg, metrics, lda.elapsed_s);
    for p in &lda.loglik {
        m.record(
            p.iteration as u64,
            p.elapsed_s,
            &[
                ("loglik_per_token", p.loglik_per_token),
                ("tokens_sampled", p.tokens_sampled as f64),
            ],
        );
    }
    m.finals(&[
        ("loglik_per_token", lda.final_loglik_per_token),
        ("tokens_per_s_per_worker", lda.tokens_per_s_per_worker),
    ]);
    m.stop_reason = format!(
        "ran iterations = {} (a Gibbs sampler has no convergence test)",
        cfg.iterations
    );
    m
}
