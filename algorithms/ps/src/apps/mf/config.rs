//! ps-mf's settings: flags, `[app.mf]`, their checks and the tables they make.

use super::*;

/// The settings of ps-mf: `[app.mf]` in TOML and the flags of `petrel train ps-mf`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default, deny_unknown_fields, remote = "Self")]
pub struct PsMfSettings {
    /// Ratings file: `user item rating` triplets (tab/space/comma; MovieLens `u.data` works)
    /// or a MatrixMarket coordinate file. Synthetic low-rank data when unset.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out ratings file (MovieLens `u1.test` beside `u1.base`): replaces the
    /// `test_fraction` split as the test set of the RMSE curve (pairs whose user or item
    /// has no training rating are left to the final evaluation, `heldout_*` in metrics.json).
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// Synthetic data: users.
    #[arg(long, default_value_t = 600)]
    pub synthetic_users: usize,
    /// Synthetic data: items.
    #[arg(long, default_value_t = 300)]
    pub synthetic_items: usize,
    /// Synthetic data: rank of the true model.
    #[arg(long, default_value_t = 5)]
    pub synthetic_rank: usize,
    /// Synthetic data: fraction of the matrix observed.
    #[arg(long, default_value_t = 0.1)]
    pub synthetic_observed: f64,
    /// Synthetic data: noise standard deviation.
    #[arg(long, default_value_t = 0.1)]
    pub synthetic_noise: f32,
    /// Seed of the data, the split and the batch order.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Fraction of the ratings held out for the RMSE (unused with `test_data`).
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    /// Factor rank of the model.
    #[arg(long, default_value_t = 16)]
    pub rank: u32,
    /// Fit a bias per user and per item: `rating ~ mean + b_user + b_item + u . v` (the
    /// biases are regularised by `regularization` too). Rows carry two more columns:
    /// users `[u, b_user, 1]`, items `[v, 1, b_item]`, the constant 1s never updated.
    #[arg(long)]
    pub biases: bool,
    /// SGD step size (with `rule`: the shards' `alpha`).
    #[arg(long, default_value_t = 0.02)]
    pub learning_rate: f32,
    /// Optimizer on the shards instead of local SGD: workers send the mini-batch gradient at
    /// the rows they read and the shards apply sgd (fixed step), adagrad or adarevision.
    /// Unset: sequential SGD on local copies, differences summed on the shards.
    #[arg(long, value_enum)]
    pub rule: Option<ServerRule>,
    /// L2 regularization, applied with every rating's step (SGD and the `rule` gradients
    /// alike), so a user's row is pulled towards zero `n_u` times per pass: the objective's
    /// L2 term is already weighted by rating counts, `regularization * n_u` per user and
    /// `* n_i` per item (ALS-WR's weighted lambda, strads-mf's `weighted_lambda`).
    #[arg(long, default_value_t = 0.05)]
    pub regularization: f32,
    /// Scale of the random initial factors.
    #[arg(long, default_value_t = 0.1)]
    pub init_scale: f32,
    /// Consistency model of the items table.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 3)]
    pub staleness: u32,
    /// Clocks per pass over a worker's ratings.
    #[arg(long, default_value_t = 4)]
    pub batches_per_epoch: u32,
    /// Passes over the data (`epochs * batches_per_epoch` clocks, unless `max_clocks`).
    #[arg(long, default_value_t = 20)]
    pub epochs: u64,
    /// Clocks per worker (overrides `epochs`).
    #[arg(long)]
    pub max_clocks: Option<u64>,
    /// The monitor stops the workers after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    /// Stop once the held-out RMSE is at or below this.
    #[arg(long)]
    pub target_rmse: Option<f64>,
    /// Clocks between two rows of the history (`history.csv`), each the model as of that
    /// clock (default: about 40 rows over the run).
    #[arg(long, value_name = "N")]
    pub eval_every: Option<u64>,
    /// Replaced by `eval_every` (the history is taken per clock, not per time): refused
    /// with a hint.
    #[arg(long, hide = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_ms: Option<u64>,
    /// Emulated compute time and stragglers.
    #[command(flatten)]
    #[serde(flatten)]
    pub stragglers: StragglerSettings,
    /// Managed communication.
    #[command(flatten)]
    #[serde(flatten)]
    pub comm: ManagedSettings,
    /// Server push (Bösen's managed communication from shards to workers): at every
    /// min-clock advance each shard pushes every changed row the workers hold, and every
    /// `server_push_tick_ms` a partial push of the top rows in this order (fifo, random,
    /// relative-magnitude), paced at `managed_bytes_per_s`. Unset: a worker sees others'
    /// updates only on a miss.
    #[arg(long, value_enum)]
    pub server_push: Option<SendPolicy>,
    /// Time between two server-push ticks of a shard, ms.
    #[arg(long, default_value_t = 10)]
    pub server_push_tick_ms: u64,
    /// Do not request the next clock's item rows during a clock (`prefetch_next_clock`). The
    /// prefetch hides the read round trip behind the compute but refreshes rows a little more
    /// often: on a bandwidth-bound link the extra replies can cost more than it saves.
    #[arg(long)]
    pub no_prefetch: bool,
    /// Output and checkpoint files.
    #[command(flatten)]
    #[serde(flatten)]
    pub files: RunFiles,
    /// Clocks between two checkpoints (0 = never write; needs no `rule` or `rule = sgd`).
    #[arg(long, default_value_t = 20)]
    pub checkpoint_every: u64,
    /// Test hook: worker `w` fails at clock `c` (`[w, c]`).
    #[arg(skip)]
    pub fail_worker_at: Option<(u32, u64)>,
}

crate::kit::settings::flat_settings!(PsMfSettings);

impl PsMfSettings {
    /// Every value in range (keys as in `[app.mf]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.data.is_none() {
            c.at_least("synthetic_users", self.synthetic_users, 1);
            c.at_least("synthetic_items", self.synthetic_items, 1);
            c.at_least("synthetic_rank", self.synthetic_rank, 1);
            c.require(
                self.synthetic_observed > 0.0 && self.synthetic_observed <= 1.0,
                "synthetic_observed",
                self.synthetic_observed,
                "must be in (0, 1]",
            );
            c.non_negative("synthetic_noise", self.synthetic_noise);
        }
        c.fraction("test_fraction", self.test_fraction);
        c.at_least("rank", self.rank, 1);
        // SGD on unit-scale ratings diverges long before a step of 1; Adagrad's and
        // AdaRevision's alpha is a length (the first step of a coordinate), not a rate.
        let (max_step, range) = match self.rule {
            Some(ServerRule::Adagrad | ServerRule::AdaRevision) => (100.0, "must be in (0, 100]"),
            _ => (1.0, "must be in (0, 1]"),
        };
        check_step(&mut c, self.learning_rate, max_step, range);
        c.non_negative("regularization", self.regularization);
        c.non_negative("init_scale", self.init_scale);
        c.at_least("batches_per_epoch", self.batches_per_epoch, 1);
        c.at_least("epochs", self.epochs, 1);
        if let Some(m) = self.max_clocks {
            c.at_least("max_clocks", m, 1);
        }
        c.positive("max_seconds", self.max_seconds);
        if let Some(t) = self.target_rmse {
            c.non_negative("target_rmse", t);
        }
        check_history(&mut c, self.eval_every, self.eval_ms);
        c.at_least("server_push_tick_ms", self.server_push_tick_ms, 1);
        self.comm.check(&mut c);
        self.stragglers.check(&mut c);
        let possible = self.checkpoints_possible();
        let needs = "checkpoints need no rule or rule sgd (adagrad and adarevision keep state on the shards); set 0";
        self.files
            .check_checkpoints(&mut c, self.checkpoint_every, possible, needs);
        c.finish()
    }

    /// Whether the tables can be checkpointed: their shard rules keep no state besides
    /// the rows (no `rule`, or `sgd`).
    pub fn checkpoints_possible(&self) -> bool {
        matches!(self.rule, None | Some(ServerRule::Sgd))
    }

    /// The items table's consistency.
    pub fn consistency(&self) -> Consistency {
        Consistency::new(self.consistency, self.staleness)
    }

    /// Clocks each worker runs: `max_clocks`, else `epochs * batches_per_epoch`.
    pub fn clocks(&self) -> u64 {
        self.max_clocks.unwrap_or_else(|| {
            self.epochs
                .saturating_mul(u64::from(self.batches_per_epoch.max(1)))
        })
    }

    /// Model columns of a row: the rank, plus the bias and constant columns with `biases`.
    pub fn row_width(&self) -> u32 {
        self.rank + if self.biases { 2 } else { 0 }
    }

    /// The columns SGD leaves alone (`(users', items')`): the constant 1s of [`Self::biases`].
    pub fn fixed_columns(&self) -> Option<(usize, usize)> {
        self.biases
            .then(|| (self.rank as usize + 1, self.rank as usize))
    }

    /// The tables: `users` (async, owned by one worker each) and `items`.
    pub fn tables(&self) -> Result<Vec<TableSpec>, PsError> {
        let model_width = self.row_width();
        let (width, spec) = match self.rule {
            Some(rule) => (
                rule.row_width(model_width),
                rule.spec(self.learning_rate, model_width),
            ),
            None => (model_width, UpdateRuleSpec::Sum),
        };
        let tables = TablesBuilder::new()
            .dense("users", width, Consistency::Async)
            .rule(spec.clone())
            .dense("items", width, self.consistency())
            .rule(spec)
            .build()?;
        // The items reads are the shared ones: their staleness is measured by content too.
        Ok((tables.into_iter())
            .map(|t| {
                let items = t.name == "items";
                t.with_content_clocks(items)
            })
            .collect())
    }
}
