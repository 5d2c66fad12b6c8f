//! What `petrel train` checks of each app before any node starts ([`prepare_job`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use petrel_actors::JobTransport;
use petrel_ml::job::InvalidSetting;
use petrel_ml::topic::LdaMetrics;
use petrel_ps::kit::settings::RunFiles;
use petrel_ps::{PsApp, PsLda, PsLdaSettings, PsLr, PsLrSettings, PsMf, PsMfSettings};
use petrel_strads::apps::lasso::{Balance, LassoApp, LassoMetrics, LassoSettings};
use petrel_strads::apps::lda::{LdaApp, LdaSettings};
use petrel_strads::apps::logistic::{ClassifierLoss, LogisticApp, LogisticMetrics};
use petrel_strads::apps::mf::{MfApp, MfMetrics, StradsMfSettings};
use petrel_strads::kit::StradsSettings;
use petrel_strads::{StradsError, StradsJob};

use super::jobfile::{prepare_out_dir, resolve_job};
use crate::CliError;

/// The most `--workers` of a job: each is a node (a thread or a process on this host).
const MAX_WORKERS: usize = 1024;

/// An app `petrel train` runs.
pub trait TrainApp {
    /// Its settings (`[app.<SECTION>]`).
    type Job: serde::Serialize + serde::de::DeserializeOwned + Clone;
    /// The `petrel train` subcommand.
    const NAME: &'static str;
    /// The settings section.
    const SECTION: &'static str;
    /// The value checks (ranges, finiteness), naming the key.
    fn validate(job: &Self::Job) -> Result<(), InvalidSetting>;
    /// The output directory setting.
    fn out(job: &mut Self::Job) -> &mut Option<PathBuf>;
    /// The input file settings (made absolute: nodes may run elsewhere).
    fn inputs(job: &mut Self::Job) -> Vec<&mut Option<PathBuf>>;
    /// Loads the data once and checks it fits: labels, rows versus `workers`.
    fn check_data(job: &Self::Job, workers: usize) -> Result<(), CliError>;
    /// A parameter-server app's run files when it checkpoints with these settings.
    fn ps_checkpoints(job: &mut Self::Job) -> Option<&mut RunFiles> {
        let _ = job;
        None
    }
}

/// The settings of `petrel train A` ([`resolve_job`], then `out_flag`), checked, with the
/// output directory probed, the inputs made absolute and the data checked against `workers`.
pub fn prepare_job<A: TrainApp>(
    flags: &A::Job,
    file: Option<&Path>,
    out_flag: Option<&Path>,
    given: &BTreeSet<String>,
    workers: usize,
) -> Result<A::Job, CliError> {
    // The flags alone first: a NaN flag has no JSON form to merge.
    A::validate(flags).map_err(invalid::<A>)?;
    let mut job = resolve_job::<A::Job>(A::SECTION, file, flags, given)?;
    if let Some(out) = out_flag {
        *A::out(&mut job) = Some(out.to_path_buf());
    }
    A::validate(&job).map_err(invalid::<A>)?;
    if workers == 0 {
        return Err(invalid::<A>(InvalidSetting::new(
            "workers",
            0,
            "must be >= 1",
        )));
    }
    if workers > MAX_WORKERS {
        return Err(invalid::<A>(InvalidSetting::new(
            "workers",
            workers,
            format!("must be <= {MAX_WORKERS} (one node each)"),
        )));
    }
    let out = A::out(&mut job)
        .clone()
        .ok_or(CliError::OutDirMissing(A::SECTION))?;
    *A::out(&mut job) = Some(prepare_out_dir(&out)?);
    for input in A::inputs(&mut job) {
        if let Some(p) = input.as_mut() {
            *p = std::fs::canonicalize(&*p).map_err(CliError::io(p))?;
        }
    }
    A::check_data(&job, workers)?;
    Ok(job)
}

/// App `A` refuses a setting.
pub(super) fn invalid<A: TrainApp>(source: InvalidSetting) -> CliError {
    CliError::Setting {
        app: A::NAME,
        source,
    }
}

/// The data of app `A` does not fit it.
fn data_error<A: TrainApp>(e: impl std::error::Error + Send + Sync + 'static) -> CliError {
    CliError::Data {
        app: A::NAME,
        source: Box::new(e),
    }
}

/// `workers` must not exceed `count` (`what`: users, rows, documents).
fn fits<A: TrainApp>(workers: usize, count: usize, what: &'static str) -> Result<(), CliError> {
    if workers > count {
        return Err(CliError::TooManyWorkers {
            app: A::NAME,
            workers,
            count,
            what,
        });
    }
    Ok(())
}

/// Implements [`TrainApp`] for `$app`: its checks, output and input fields, then the rest
/// (`ps` apps: name, section and output directory from [`PsApp`] and their run files).
macro_rules! train_app {
    (ps $app:ty: $job:ty, inputs [$($input:ident),+], $($rest:tt)*) => {
        train_app!($app: $job, <$app as PsApp>::NAME, <$app as PsApp>::SECTION,
            validate <$job>::validate, out files.out, inputs [$($input),+], $($rest)*);
    };
    ($app:ty: $job:ty, $name:expr, $section:expr, validate $validate:expr,
        out $($out:ident).+, inputs [$($input:ident),+], $($rest:tt)*) => {
        impl TrainApp for $app {
            type Job = $job;
            const NAME: &'static str = $name;
            const SECTION: &'static str = $section;
            fn validate(job: &$job) -> Result<(), InvalidSetting> {
                ($validate)(job)
            }
            fn out(job: &mut $job) -> &mut Option<PathBuf> {
                &mut job.$($out).+
            }
            fn inputs(job: &mut $job) -> Vec<&mut Option<PathBuf>> {
                vec![$(&mut job.$input),+]
            }
            $($rest)*
        }
    };
}

/// The `timeout_s` and `checkpoints` of STRADS settings with `checkpoint_dir`, `resume` and
/// `balance`.
macro_rules! round_checkpoints {
    ($job:ty) => {
        fn timeout_s(job: &$job) -> u64 {
            job.timeout_s
        }
        fn checkpoints(job: &mut $job) -> Option<(&mut Option<PathBuf>, &mut bool)> {
            // Dynamic dealing does not checkpoint (the settings' checks refuse a directory).
            (job.balance == Balance::Static).then_some((&mut job.checkpoint_dir, &mut job.resume))
        }
    };
}

/// A PS app's run files when it writes checkpoints (`writes`) or names a directory.
fn ps_files(files: &mut RunFiles, writes: bool) -> Option<&mut RunFiles> {
    files.wanted(writes).is_some().then_some(files)
}

train_app!(ps PsMf: PsMfSettings, inputs [data, test_data],
    fn ps_checkpoints(job: &mut PsMfSettings) -> Option<&mut RunFiles> {
        let writes = job.checkpoint_every > 0 && job.checkpoints_possible();
        ps_files(&mut job.files, writes)
    }
    fn check_data(job: &PsMfSettings, workers: usize) -> Result<(), CliError> {
        if let Some(s) = job.stragglers.straggler
            && s as usize >= workers
        {
            let why = format!("must name a worker, 0..{workers}");
            return Err(invalid::<Self>(InvalidSetting::new("straggler", s, why)));
        }
        let data = petrel_ps::apps::mf::PsMfData::load(job).map_err(data_error::<Self>)?;
        // Worker w owns the users u % workers == w.
        fits::<Self>(workers, data.train.n_users, "users")
    }
);

train_app!(ps PsLr: PsLrSettings, inputs [data, test_data],
    fn ps_checkpoints(job: &mut PsLrSettings) -> Option<&mut RunFiles> {
        let writes = job.checkpoint_every > 0 && job.checkpoints_possible();
        ps_files(&mut job.files, writes)
    }
    fn check_data(job: &PsLrSettings, workers: usize) -> Result<(), CliError> {
        let data = petrel_ps::apps::lr::PsLrData::load(job).map_err(data_error::<Self>)?;
        fits::<Self>(workers, data.train.len(), "training rows")
    }
);

train_app!(ps PsLda: PsLdaSettings, inputs [docword, vocab, test_data],
    fn ps_checkpoints(job: &mut PsLdaSettings) -> Option<&mut RunFiles> {
        ps_files(&mut job.files, job.checkpoint_every > 0)
    }
    fn check_data(job: &PsLdaSettings, workers: usize) -> Result<(), CliError> {
        let corpus = job.load().map_err(data_error::<Self>)?;
        fits::<Self>(workers, corpus.docs.len(), "documents")
    }
);

train_app!(LassoApp: LassoSettings, "lasso", <LassoApp as StradsJob>::SECTION,
    validate LassoSettings::validate, out out_dir, inputs [data, test_data],
    fn check_data(job: &LassoSettings, workers: usize) -> Result<(), CliError> {
        // The design as stored (a cluster's explicit centring is checked before launch).
        let (x, _) = job.load_sparse().map_err(data_error::<Self>)?;
        if job.resolved_solver() == petrel_strads::apps::lasso::LassoSolver::GaussSeidel {
            // Gauss-Seidel workers split the columns.
            return fits::<Self>(workers, x.n_columns(), "features");
        }
        // Scheduled workers split the rows.
        fits::<Self>(workers, x.n_rows, "rows")
    }
);

train_app!(LogisticApp: LassoSettings, "logistic", <LogisticApp as StradsJob>::SECTION,
    validate <LogisticApp as StradsJob>::validate_config, out out_dir, inputs [data, test_data],
    fn check_data(job: &LassoSettings, workers: usize) -> Result<(), CliError> {
        let (x, _) = petrel_strads::apps::logistic::load(job).map_err(data_error::<Self>)?;
        fits::<Self>(workers, x.n_rows, "rows")
    }
);

train_app!(MfApp: StradsMfSettings, "strads-mf", <MfApp as StradsJob>::SECTION,
    validate StradsMfSettings::validate, out out_dir, inputs [data, test_data],
    fn check_data(job: &StradsMfSettings, workers: usize) -> Result<(), CliError> {
        // Counted in streaming passes, as the nodes do.
        let (summary, _) = job.summary_and_test().map_err(data_error::<Self>)?;
        // Block rotation gives every worker a bucket of users and a block of items.
        fits::<Self>(workers, summary.shape.n_users, "users")?;
        fits::<Self>(workers, summary.shape.n_items, "items")
    }
);

train_app!(LdaApp: LdaSettings, "lda", <LdaApp as StradsJob>::SECTION,
    validate LdaSettings::validate, out out_dir, inputs [docword, vocab, test_data],
    fn check_data(job: &LdaSettings, workers: usize) -> Result<(), CliError> {
        let corpus = job.load().map_err(data_error::<Self>)?;
        // Documents are split over the workers, and so is the vocabulary (word rotation).
        fits::<Self>(workers, corpus.docs.len(), "documents")?;
        fits::<Self>(workers, corpus.vocab_size, "words")
    }
);

/// Whether `[app.<section>]` writes checkpoints but names no `checkpoint_dir`.
pub fn checkpoints_by_default(section: &str, value: &serde_json::Value) -> bool {
    fn job<A: TrainApp>(value: &serde_json::Value) -> Option<A::Job> {
        serde_json::from_value(value.clone()).ok()
    }
    fn ps<A: TrainApp>(value: &serde_json::Value) -> bool {
        let wanted = |mut j| A::ps_checkpoints(&mut j).is_some_and(|f| f.checkpoint_dir.is_none());
        job::<A>(value).is_some_and(wanted)
    }
    let strads = |dir: &Option<PathBuf>, every: u64| dir.is_none() && every > 0;
    match section {
        // Logistic regression reads Lasso's settings.
        <LassoApp as TrainApp>::SECTION | <LogisticApp as TrainApp>::SECTION => {
            job::<LassoApp>(value).is_some_and(|j| {
                strads(&j.checkpoint_dir, j.checkpoint_every)
                    && j.schedulers <= 1
                    && j.balance == Balance::Static
            })
        }
        <MfApp as TrainApp>::SECTION => job::<MfApp>(value).is_some_and(|j| {
            strads(&j.checkpoint_dir, j.checkpoint_every) && j.balance == Balance::Static
        }),
        <LdaApp as TrainApp>::SECTION => job::<LdaApp>(value).is_some_and(|j| {
            strads(&j.checkpoint_dir, j.checkpoint_every) && j.balance == Balance::Static
        }),
        <PsMf as TrainApp>::SECTION => ps::<PsMf>(value),
        <PsLr as TrainApp>::SECTION => ps::<PsLr>(value),
        <PsLda as TrainApp>::SECTION => ps::<PsLda>(value),
        _ => false,
    }
}

/// A STRADS app that `petrel train` runs generically ([`super::train_prepared`]).
pub trait StradsTrainApp:
    StradsJob<Config = <Self as TrainApp>::Job> + TrainApp<Job: clap::Args>
{
    /// What its scheduler writes to `metrics.json`.
    type Metrics: serde::de::DeserializeOwned;
    /// Seconds a round may take (its cluster's request timeout).
    fn timeout_s(job: &Self::Job) -> u64;
    /// Its checkpoint directory and resume settings, when it can checkpoint.
    fn checkpoints(job: &mut Self::Job) -> Option<(&mut Option<PathBuf>, &mut bool)>;
    /// The progress points a full run records (the progress bar's length), if known.
    fn progress_points(job: &Self::Job) -> Option<u64> {
        let _ = job;
        None
    }
    /// Refuses settings that cannot run on this transport (`None`: in this thread).
    fn check_run(job: &Self::Job, transport: Option<JobTransport>) -> Result<(), CliError> {
        let _ = (job, transport);
        Ok(())
    }
    /// Whether `job` takes workers that join and leave while it runs (`--standby-workers`,
    /// `--scale`); the default: no, the app keeps a fixed membership.
    fn elastic(job: &Self::Job) -> bool {
        let _ = job;
        false
    }
    /// Whether an elastic `job` takes a dead worker as a leave (`--on-node-death leave`);
    /// the default: when it is elastic.
    fn takes_deaths(job: &Self::Job) -> bool {
        Self::elastic(job)
    }
    /// The scheduler nodes of its cluster (with `colocate`, all on one node).
    fn scheduler_nodes(job: &Self::Job, colocate: bool) -> Vec<(String, Vec<String>)> {
        let _ = (job, colocate);
        vec![("scheduler".into(), vec![Self::SCHEDULER_ROLE.into()])]
    }
    /// The settings of restart `attempt` (1, 2, ...; 0 is the first run).
    fn next_attempt(job: &mut Self::Job, attempt: u32) {
        let _ = (job, attempt);
    }
    /// `--transport none`: the run in this thread (by default the serial driver).
    fn run_in_thread(job: &Self::Job, workers: usize) -> Result<Self::Metrics, CliError> {
        let mut job = job.clone();
        let out = Self::out(&mut job).clone().unwrap_or_default();
        petrel_strads::kit::run_serial_and_finish::<Self>(&job, workers)?;
        super::read_json(&out.join("metrics.json"))
    }
    /// The line printed when the run ends (`out`: the output directory).
    fn summary(job: &Self::Job, m: &Self::Metrics, out: &str) -> String;
}

impl StradsTrainApp for LassoApp {
    type Metrics = LassoMetrics;
    fn timeout_s(job: &LassoSettings) -> u64 {
        job.timeout_s
    }
    fn checkpoints(job: &mut LassoSettings) -> Option<(&mut Option<PathBuf>, &mut bool)> {
        // Several schedulers and dynamic dealing do not checkpoint (the settings' checks
        // refuse a checkpoint directory).
        (job.schedulers <= 1 && job.balance == Balance::Static)
            .then_some((&mut job.checkpoint_dir, &mut job.resume))
    }
    fn check_run(job: &LassoSettings, transport: Option<JobTransport>) -> Result<(), CliError> {
        let wants_checkpoints = job.checkpoint_dir.is_some() || job.resume;
        if transport.is_none() && (job.schedulers > 1 || wants_checkpoints) {
            return Err(CliError::Usage(
                "--transport none solves in one thread: --schedulers, --checkpoint-dir and --resume do not apply".into(),
            ));
        }
        if job.schedulers > 1 && wants_checkpoints {
            return Err(StradsError::CheckpointUnsupported.into());
        }
        Ok(())
    }
    fn scheduler_nodes(job: &LassoSettings, colocate: bool) -> Vec<(String, Vec<String>)> {
        super::lasso_scheduler_nodes(job.schedulers, colocate)
    }
    fn elastic(job: &LassoSettings) -> bool {
        petrel_strads::apps::lasso::supports_membership_changes(job)
    }
    fn next_attempt(job: &mut LassoSettings, attempt: u32) {
        if attempt > 0 {
            // An injected fault (a test hook) fires in the first attempt only.
            job.fail_after_checkpoints = None;
        }
    }
    fn run_in_thread(job: &LassoSettings, _workers: usize) -> Result<LassoMetrics, CliError> {
        Ok(petrel_strads::apps::lasso::baseline::run_baseline(job)?.metrics)
    }
    fn summary(job: &LassoSettings, m: &LassoMetrics, out: &str) -> String {
        format!(
            "lasso {} ({} scheduler(s)): {} rounds, {} coordinate updates, {:.2} s; objective {:.6}, KKT violation {:.3e}, duality gap {:.3e}; {} non-zeros; wrote {out}",
            m.mode,
            job.schedulers,
            m.rounds,
            m.updates,
            m.elapsed_s,
            m.final_objective,
            m.final_kkt_violation,
            m.final_duality_gap,
            m.evaluations.last().map(|e| e.nonzeros).unwrap_or(0),
        )
    }
}

impl StradsTrainApp for LogisticApp {
    type Metrics = LogisticMetrics;
    fn elastic(job: &LassoSettings) -> bool {
        petrel_strads::apps::lasso::supports_membership_changes(job)
    }
    fn timeout_s(job: &LassoSettings) -> u64 {
        job.timeout_s
    }
    fn checkpoints(job: &mut LassoSettings) -> Option<(&mut Option<PathBuf>, &mut bool)> {
        <LassoApp as StradsTrainApp>::checkpoints(job)
    }
    fn next_attempt(job: &mut LassoSettings, attempt: u32) {
        <LassoApp as StradsTrainApp>::next_attempt(job, attempt);
    }
    fn run_in_thread(job: &LassoSettings, _workers: usize) -> Result<LogisticMetrics, CliError> {
        Ok(petrel_strads::apps::logistic::run_baseline(job)?)
    }
    fn summary(job: &LassoSettings, m: &LogisticMetrics, out: &str) -> String {
        let loss = job.loss.filter(|&l| l != ClassifierLoss::Logistic);
        let loss = loss.map_or(String::new(), |l| format!(" ({} loss)", l.name()));
        format!(
            "logistic{loss} {}: {} rounds, {} coordinate updates, {:.2} s; objective {:.6}, training accuracy {:.4}; {} non-zeros; wrote {out}",
            m.mode,
            m.rounds,
            m.updates,
            m.elapsed_s,
            m.final_objective,
            m.final_training_accuracy,
            m.nonzeros,
        )
    }
}

impl StradsTrainApp for MfApp {
    type Metrics = MfMetrics;
    round_checkpoints!(StradsMfSettings);
    fn elastic(job: &StradsMfSettings) -> bool {
        petrel_strads::apps::mf::supports_membership_changes(job)
    }
    // A dead worker's H block is lost with it.
    fn takes_deaths(_job: &StradsMfSettings) -> bool {
        false
    }
    fn summary(_job: &StradsMfSettings, m: &MfMetrics, out: &str) -> String {
        let test = if m.test_ratings > 0 {
            format!(", test RMSE {:.4}", m.final_test_rmse)
        } else {
            String::new()
        };
        format!(
            "mf rank {}: {} users x {} items, {} train ratings; train RMSE {:.4}{test}, {:.2} s; wrote {out}",
            m.rank, m.n_users, m.n_items, m.train_ratings, m.final_train_rmse, m.elapsed_s,
        )
    }
}

impl StradsTrainApp for LdaApp {
    type Metrics = LdaMetrics;
    round_checkpoints!(LdaSettings);
    fn elastic(job: &LdaSettings) -> bool {
        petrel_strads::apps::lda::supports_membership_changes(job)
    }
    // A dead worker's word-topic block is lost with it.
    fn takes_deaths(_job: &LdaSettings) -> bool {
        false
    }
    // One point at the start, then one per pass.
    fn progress_points(job: &LdaSettings) -> Option<u64> {
        Some(job.iterations as u64 + 1)
    }
    fn summary(_job: &LdaSettings, m: &LdaMetrics, out: &str) -> String {
        format!(
            "lda {} topics: {} docs, {} words, {} tokens; log-likelihood per token {:.4}; {:.0} tokens/s per worker; wrote {out}",
            m.n_topics,
            m.n_docs,
            m.vocab_size,
            m.n_tokens,
            m.final_loglik_per_token,
            m.tokens_per_s_per_worker,
        )
    }
}

#[cfg(test)]
mod default_checkpoint_tests {
    use super::checkpoints_by_default;
    use serde_json::json;

    #[test]
    fn apps_that_checkpoint_get_a_default_directory_unless_they_cannot_or_name_one() {
        for section in [
            "lasso",
            "logistic",
            "strads_mf",
            "lda",
            "mf",
            "lr",
            "ps_lda",
        ] {
            assert!(checkpoints_by_default(section, &json!({})), "{section}");
            assert!(
                !checkpoints_by_default(section, &json!({"checkpoint_every": 0})),
                "{section}: checkpoint_every = 0 turns them off"
            );
            assert!(
                !checkpoints_by_default(section, &json!({"checkpoint_dir": "/c"})),
                "{section}: names its own"
            );
        }
        // Several Lasso schedulers do not checkpoint; nor does a PS rule with shard state.
        assert!(!checkpoints_by_default("lasso", &json!({"schedulers": 2})));
        // Dynamic dealing moves work between workers, so a worker's checkpoint would not fit.
        for section in ["lasso", "logistic", "strads_mf", "lda"] {
            let dynamic = json!({"balance": "dynamic"});
            assert!(!checkpoints_by_default(section, &dynamic), "{section}");
        }
        assert!(!checkpoints_by_default("mf", &json!({"rule": "adagrad"})));
        // Apps without checkpoints, and a section that does not parse.
        assert!(!checkpoints_by_default("demo", &json!({"rounds": 3})));
        assert!(!checkpoints_by_default("lasso", &json!({"no_such_key": 1})));
    }
}
