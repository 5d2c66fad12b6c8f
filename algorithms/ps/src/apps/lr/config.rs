//! ps-lr's settings: the flags of `petrel train ps-lr` and `[app.lr]`, and their checks.

use super::*;

/// The settings of ps-lr: `[app.lr]` in TOML and the flags of `petrel train ps-lr`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default, deny_unknown_fields, remote = "Self")]
pub struct PsLrSettings {
    /// LIBSVM file (`label idx:val ...`); synthetic separable classes when unset.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out LIBSVM file: replaces the `test_fraction` split as the test set of the
    /// accuracy and log-loss curve; the final figures go to metrics.json as `heldout_*`.
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// Synthetic data: samples.
    #[arg(long, default_value_t = 2000)]
    pub synthetic_samples: usize,
    /// Synthetic data: features.
    #[arg(long, default_value_t = 20)]
    pub synthetic_features: usize,
    /// Synthetic data: classes.
    #[arg(long, default_value_t = 3)]
    pub synthetic_classes: usize,
    /// Synthetic data: nonzero features per sample, drawn with power-law frequencies
    /// (`synthetic_exponent`); 0 = every feature, dense.
    #[arg(long, default_value_t = 0)]
    pub synthetic_nnz: usize,
    /// Synthetic data: feature `j` is drawn with weight `(j + 1)^-exponent` (with
    /// `synthetic_nnz`).
    #[arg(long, default_value_t = 1.0)]
    pub synthetic_exponent: f64,
    /// Updates each shard holds back before applying one (0: none): an injected delay for
    /// delay-tolerance experiments.
    #[arg(long, default_value_t = 0)]
    pub update_delay: u64,
    /// Seed of the data and the split.
    #[arg(long, default_value_t = 11)]
    pub seed: u64,
    /// Fraction of the samples held out (unused with `test_data`).
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    /// Step size of the shards' rule (AdaRevision's and Adagrad's `alpha`).
    #[arg(long, default_value_t = 0.5)]
    pub learning_rate: f32,
    /// The shards' update rule: sgd (fixed step), adagrad or adarevision.
    #[arg(long, value_enum, default_value_t = ServerRule::Sgd)]
    pub rule: ServerRule,
    /// Samples per clock and worker.
    #[arg(long, default_value_t = 50)]
    pub batch_size: usize,
    /// Consistency model of the weights table.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 2)]
    pub staleness: u32,
    /// Clocks per worker.
    #[arg(long = "clocks", default_value_t = 200)]
    pub max_clocks: u64,
    /// Clocks between two rows of the history (`history.csv`), each the model as of that
    /// clock (default: about 40 rows over the run).
    #[arg(long, value_name = "N")]
    pub eval_every: Option<u64>,
    /// Replaced by `eval_every` (the history is taken per clock, not per time): refused
    /// with a hint.
    #[arg(long, hide = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_ms: Option<u64>,
    /// Stop once the held-out log-loss is at or below this.
    #[arg(long)]
    pub target_log_loss: Option<f64>,
    /// The monitor stops the workers after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    /// Emulated compute time and stragglers.
    #[command(flatten)]
    #[serde(flatten)]
    pub stragglers: StragglerSettings,
    /// Output and checkpoint files.
    #[command(flatten)]
    #[serde(flatten)]
    pub files: RunFiles,
    /// Clocks between two checkpoints (0 = never write; needs `rule = sgd`: adagrad and
    /// adarevision keep state on the shards).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: u64,
}

crate::kit::settings::flat_settings!(PsLrSettings);

impl PsLrSettings {
    /// Whether the weights can be checkpointed (rule `sgd` keeps no state beside the rows).
    pub fn checkpoints_possible(&self) -> bool {
        self.rule == ServerRule::Sgd
    }

    /// Every value in range (keys as in `[app.lr]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.data.is_none() {
            c.at_least("synthetic_samples", self.synthetic_samples, 2);
            c.at_least("synthetic_features", self.synthetic_features, 1);
            c.at_least("synthetic_classes", self.synthetic_classes, 2);
            let half = self.synthetic_features / 2;
            c.at_most(
                "synthetic_nnz",
                self.synthetic_nnz,
                half,
                "half the features",
            );
            c.non_negative("synthetic_exponent", self.synthetic_exponent);
        }
        c.fraction("test_fraction", self.test_fraction);
        // Adagrad's and AdaRevision's alpha is a length, not a rate.
        let (max_step, range) = match self.rule {
            ServerRule::Sgd => (10.0, "must be in (0, 10] with rule sgd"),
            ServerRule::Adagrad | ServerRule::AdaRevision => (100.0, "must be in (0, 100]"),
        };
        check_step(&mut c, self.learning_rate, max_step, range);
        c.at_least("batch_size", self.batch_size, 1);
        c.at_least("max_clocks", self.max_clocks, 1);
        check_history(&mut c, self.eval_every, self.eval_ms);
        self.stragglers.check(&mut c);
        let possible = self.checkpoints_possible();
        let needs =
            "checkpoints need rule sgd (adagrad and adarevision keep state on the shards); set 0";
        self.files
            .check_checkpoints(&mut c, self.checkpoint_every, possible, needs);
        c.finish()
    }
}
