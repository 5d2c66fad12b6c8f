//! The choice of solver in `[app.lasso]`.

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
