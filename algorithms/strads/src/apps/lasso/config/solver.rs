//! The choice of solver in `[app.lasso]` (and `[app.logistic]`), and the logistic job's loss.

use serde::{Deserialize, Serialize};

/// How `petrel train lasso` solves the problem over a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LassoSolver {
    /// `gauss-seidel`, unless the job sets something only the scheduled mode has
    /// ([`super::LassoSettings::scheduled_only_settings`]: several schedulers, or a scheduling knob
    /// away from its default), then `scheduled`: no setting is ever ignored.
    #[default]
    Auto,
    /// Scheduled parallel coordinate descent: row-holding workers, blocks of coordinates
    /// chosen by priority and the dependency check.
    Scheduled,
    /// Column-holding workers running Gauss-Seidel sweeps against a full local residual
    /// (Lasso, `apps::lasso::gs`) or the full margins (logistic, `apps::logistic::gs`).
    GaussSeidel,
}

impl std::fmt::Display for LassoSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LassoSolver::Auto => "auto",
            LassoSolver::Scheduled => "scheduled",
            LassoSolver::GaussSeidel => "gauss-seidel",
        })
    }
}

/// How a job deals its work to the workers (`balance`, `--balance`): the scheduled
/// solver's rows (Lasso, logistic), LDA's documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Once (equal row blocks; LDA: documents balanced by length).
    #[default]
    Static,
    /// Re-dealt between rounds so that the workers' rounds finish together, by each
    /// worker's measured time per row or document ([`crate::core::balance::LoadBalancer`]).
    Dynamic,
}

impl std::fmt::Display for Balance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Balance::Static => "static",
            Balance::Dynamic => "dynamic",
        })
    }
}

/// The loss of `petrel train logistic` (`loss`, `--loss`): every one runs on the
/// Gauss-Seidel solver ([`crate::core::loss::MarginLoss`]); the scheduled solver is
/// logistic only. The Lasso job has the squared loss and refuses the setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifierLoss {
    /// `log(1 + exp(-y x^T b))`: L1 logistic regression.
    #[default]
    Logistic,
    /// `max(0, 1 - y x^T b)^2`: the L1-regularised L2-loss SVM (liblinear's
    /// `L1R_L2LOSS_SVC`).
    SquaredHinge,
}

impl ClassifierLoss {
    /// The saved model's task: how `petrel eval` and `predict` read its margins.
    pub fn task(self) -> petrel_ml::model::LinearTask {
        match self {
            ClassifierLoss::Logistic => petrel_ml::model::LinearTask::BinaryClassification,
            ClassifierLoss::SquaredHinge => {
                petrel_ml::model::LinearTask::SquaredHingeClassification
            }
        }
    }

    /// Its name in the settings.
    pub fn name(self) -> &'static str {
        use crate::core::loss::{Logistic, MarginLoss, SquaredHinge};
        match self {
            ClassifierLoss::Logistic => Logistic::NAME,
            ClassifierLoss::SquaredHinge => SquaredHinge::NAME,
        }
    }

    /// `|d loss / dm|` at `m = 0`: `lambda_max = this * max_j |x_j^T y|` (the smallest
    /// lambda with an all-zero solution).
    pub fn slope_at_zero(self) -> f64 {
        use crate::core::loss::{Logistic, MarginLoss, SquaredHinge};
        match self {
            ClassifierLoss::Logistic => Logistic::SLOPE_AT_ZERO,
            ClassifierLoss::SquaredHinge => SquaredHinge::SLOPE_AT_ZERO,
        }
    }
}

/// The `--mode` flag's values: the scheduler's core type stays free of the CLI parser.
impl clap::ValueEnum for crate::core::scheduler::ScheduleMode {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use crate::core::scheduler::ScheduleMode::*;
        let help = match self {
            Dynamic => {
                "Sample without replacement with probability proportional to `delta^2 + eta`"
            }
            Random => "Uniformly random coordinates without replacement (Shotgun-like baseline)",
            Cyclic => "The next coordinates in index order, wrapping around",
        };
        Some(clap::builder::PossibleValue::new(self.name()).help(help))
    }
}
