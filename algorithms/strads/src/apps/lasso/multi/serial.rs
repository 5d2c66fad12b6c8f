//! A multi-scheduler job in one thread (no actors), through the kit's serial driver: the
//! deterministic reference for the distributed run's logic.

use std::time::Duration;

use super::build_schedulers;
use super::sync::{LeadBook, MultiLassoMetrics, lead_start};
use crate::apps::lasso::config::LassoSettings;
use crate::apps::lasso::worker::LassoWorker;
use crate::core::lasso::LassoWorkerState;
use crate::error::StradsError;
use crate::kit::serial::{SerialOptions, run_star};

/// A multi-scheduler job with every scheduler and worker in this thread and no actors:
/// the schedulers' epochs run one after the other (scheduler 0's, then 1's, ...), then the
/// lead evaluates. A deterministic reference for the distributed run's logic.
pub fn run_multi_without_actors(
    job: &LassoSettings,
    workers: usize,
) -> Result<(Vec<f32>, MultiLassoMetrics), StradsError> {
    let job = &job.with_multi_defaults();
    let (x, y) = job.load()?;
    let all: Vec<usize> = (0..job.schedulers).collect();
    let (ranges, mut apps) = build_schedulers(&x, &y, job, workers, &all)?;
    let means = job.design_means(&x);
    let mut ws = crate::core::split_evenly(x.n_rows, workers)
        .into_iter()
        .map(|r| {
            let (block, y_block) = (x.row_block(r.clone()), y[r].to_vec());
            match &means {
                Some(m) => LassoWorkerState::centred(block, y_block, m.clone()),
                None => LassoWorkerState::new(block, y_block),
            }
            .map(|st| LassoWorker::with_schedulers(st, job.schedulers))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (heldout, zero) = lead_start(&x, &y, job, &all)?;
    let mut book = LeadBook::new(ranges, job, workers, x.n_rows, heldout, zero);
    let mut next = vec![0u64; apps.len()];
    loop {
        for (app, next) in apps.iter_mut().zip(next.iter_mut()) {
            app.begin_segment();
            let opts = segment(job, app.index(), *next);
            *next = run_star(app, &mut ws, &opts)?.rounds;
        }
        let epoch = book.core.epoch();
        for app in &apps[1..] {
            book.core.add(app.report(epoch))?;
        }
        let model = book.assemble(&apps[0]);
        apps[0].begin_evaluation(model);
        let opts = segment(job, 0, next[0]);
        next[0] = run_star(&mut apps[0], &mut ws, &opts)?.rounds;
        let d = book.decide(&mut apps[0])?;
        for app in &mut apps[1..] {
            app.apply_decision(&d);
        }
        if d.stop {
            let model = apps[0].evaluated_model().to_vec();
            return Ok(book.outcome(&apps[0], model, Duration::ZERO));
        }
    }
}

/// Scheduler `s`'s next segment, continuing its round count at `first_round`.
fn segment(job: &LassoSettings, s: usize, first_round: u64) -> SerialOptions {
    SerialOptions {
        depth: job.depth,
        scheduler: s as u32,
        first_round,
        ..SerialOptions::default()
    }
}
