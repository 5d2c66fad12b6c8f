//! Lasso with its coefficients split over several schedulers (`[app.lasso] schedulers = S`).
//!
//! **Partition.** The `d` coefficients are cut into `S` contiguous column ranges of about
//! equal weight `nnz(x_j) + 1` ([`partition_columns`]), so the schedulers get equal work
//! per round. Correlated features are often neighbours and the dependency filter only sees
//! its own scheduler's variables, so a contiguous cut leaves at most one correlated group
//! straddling each boundary.
//!
//! **Schedulers.** Scheduler `s` runs role [`scheduler_role_name`]`(s)` (`s = 0` is
//! `strads-lasso-scheduler`); a node's first scheduler role runs all the ones it claims.
//! Each runs a [`LassoScheduling`](crate::apps::lasso::LassoScheduling) over its columns
//! ([`SliceScheduling`]) and dispatches to every worker; the workers serve all of them and
//! count applied commits per scheduler ([`super::LassoWorker`]). Rounds are per scheduler.
//!
//! **Coordination.** The job runs in epochs of `eval_every` update rounds per scheduler.
//! At an epoch's end every scheduler drains its pipeline; a follower (`s > 0`) sends one
//! empty round (a flush, answered once the workers applied its earlier commits, which
//! travel FIFO) and then a [`SyncReport`] to the lead (scheduler 0): its non-zeros, rounds,
//! updates and whether it wants to stop. The lead, with its own epoch drained and every
//! report in ([`SyncCore`]), is the only sender, so the workers' state is consistent: it
//! dispatches one `Evaluate` round of the assembled model and [`combine_evaluation`] gives
//! the exact objective, KKT violation and duality gap. The stop rule ([`SyncCore::decide`])
//! is the single scheduler's (gap below `gap_tolerance`, `target_objective` reached, any
//! scheduler at `max_rounds`, or divergence); the decision goes back as the reply, and on
//! stop the lead writes the whole model's outputs.
//!
//! Between epochs a push may see another scheduler's commits on one worker and not yet on
//! another (slightly stale reads, as in the STRADS papers); only the exact evaluations
//! decide. The lead's per-round objective trace is `1/2 ||r||^2` plus `lambda` times its
//! own L1 norm plus the others' as of the last evaluation.

use std::ops::Range;

use super::SCHEDULER_ROLE;
use super::config::LassoSettings;
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;

mod partition;
mod roles;
mod slice;
mod sync;

pub use crate::apps::lasso::metrics::{EvalNumbers, combine_evaluation};
pub use partition::{column_weight, column_weights, partition_columns, partition_weighted};
pub use roles::SYNC_ACTOR;
pub(super) use roles::scheduler_entry;
pub use slice::SliceScheduling;
pub use sync::{
    LeadStatus, MultiLassoMetrics, SchedulerSummary, SyncCore, SyncDecision, SyncReport,
};

/// Scheduler roles registered (`strads-lasso-scheduler`, `strads-lasso-scheduler-1`, ...).
pub const MAX_SCHEDULERS: usize = 16;
/// Role of scheduler `index`: `strads-lasso-scheduler` for 0, `strads-lasso-scheduler-<i>`
/// for the others.
pub fn scheduler_role_name(index: usize) -> String {
    if index == 0 {
        SCHEDULER_ROLE.to_string()
    } else {
        format!("{SCHEDULER_ROLE}-{index}")
    }
}

/// The scheduler index a role name stands for, if it is a Lasso scheduler role.
pub fn scheduler_index_of(role: &str) -> Option<usize> {
    if role == SCHEDULER_ROLE {
        return Some(0);
    }
    role.strip_prefix(SCHEDULER_ROLE)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// `schedulers` is within `1..=MAX_SCHEDULERS`.
fn check_count(schedulers: usize) -> Result<(), StradsError> {
    match schedulers {
        0 => Err(StradsError::NoSchedulers),
        s if s > MAX_SCHEDULERS => Err(StradsError::SchedulersAboveMax { schedulers }),
        _ => Ok(()),
    }
}

/// Which node runs each scheduler index, from every node's `(name, roles)`: exactly one node
/// per index in `0..schedulers`, no index out of range.
pub fn assign_schedulers(
    nodes: &[(String, Vec<String>)],
    schedulers: usize,
) -> Result<Vec<String>, StradsError> {
    check_count(schedulers)?;
    let mut owner: Vec<Option<String>> = vec![None; schedulers];
    for (node, roles) in nodes {
        for role in roles {
            let Some(index) = scheduler_index_of(role) else {
                continue;
            };
            let Some(slot) = owner.get_mut(index) else {
                return Err(StradsError::SchedulerIndexOutOfRange {
                    node: node.clone(),
                    role: role.clone(),
                    index,
                    schedulers,
                });
            };
            if let Some(first) = slot {
                return Err(StradsError::DuplicateScheduler {
                    index,
                    first: first.clone(),
                    second: node.clone(),
                });
            }
            *slot = Some(node.clone());
        }
    }
    owner
        .into_iter()
        .enumerate()
        .map(|(index, n)| {
            n.ok_or_else(|| StradsError::MissingScheduler {
                role: scheduler_role_name(index),
                schedulers,
            })
        })
        .collect()
}

/// The partition and the scheduler halves of a job on `(x, y)`.
pub(super) fn build_schedulers(
    x: &SparseColumns,
    y: &[f32],
    job: &LassoSettings,
    workers: usize,
    indices: &[usize],
) -> Result<(Vec<Range<usize>>, Vec<SliceScheduling>), StradsError> {
    let ranges = partition_columns(&column_weights(x), job.schedulers)?;
    let lambda = job.resolve_lambda(x, y);
    let apps = indices
        .iter()
        .map(|&s| {
            let range = ranges.get(s).cloned().ok_or_else(|| {
                StradsError::SchedulerSync(format!(
                    "scheduler index {s} out of range (schedulers = {})",
                    job.schedulers
                ))
            })?;
            SliceScheduling::new(x, y, job, workers, s, range, lambda)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ranges, apps))
}

#[cfg(test)]
pub(crate) mod tests;
