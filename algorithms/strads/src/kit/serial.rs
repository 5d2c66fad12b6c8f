//! The serial driver: a scheduler half and its worker halves in one thread, no actors, in
//! exactly the message order of the actor shells. It is the reference a distributed run
//! must reproduce bit for bit, and what the apps' unit tests run.
//!
//! - [`run_star`]: star routing with pipelining (`depth` rounds in flight). A round's
//!   pushes happen when it is dispatched and its commit when it is pulled, oldest first,
//!   as [`run_scheduler`](crate::shells::run_scheduler) does.
//! - [`run_ring`]: ring routing, one round at a time, through the same
//!   [`RingCore`]s as the actors, with the blocks' handoffs delivered late or in a shuffled
//!   order ([`Delivery`]). After every message it checks that no block is in two places; a
//!   dispatch whose block never comes is reported as a deadlock naming the block's
//!   whereabouts.
//!
//! Both ask the one [`PipelineCore`] what to do next.

use crate::core::StradsModelError;
use crate::core::app::{BlockId, Plan, Push, RingApp, RingPush, Schedule, Step, StradsApp};
use crate::core::pipeline::{PipelineAction, PipelineCore};
use crate::core::ring::{Ready, RingCore, settle};
use crate::error::StradsError;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Handoff delivery order of [`run_ring`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delivery {
    /// Every handoff arrives after the next round's dispatches: each dispatch waits.
    #[default]
    Late,
    /// Dispatches and handoffs arrive in an order shuffled from this seed.
    Shuffled(u64),
}

/// How the serial driver runs a scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialOptions {
    /// Rounds in flight (star routing; ring routing runs one at a time).
    pub depth: usize,
    /// The scheduler's index, passed to [`Push::push_from`] / [`Push::commit_from`].
    pub scheduler: u32,
    /// The first round number (a scheduler that runs in segments continues its count).
    pub first_round: u64,
    /// Handoff order (ring routing).
    pub delivery: Delivery,
    /// Pulls see the time since the run started (star routing; what a single-threaded
    /// run reports as its solve time); otherwise zero, so that reruns compare bit for bit.
    pub timed: bool,
}

impl Default for SerialOptions {
    fn default() -> Self {
        SerialOptions {
            depth: 1,
            scheduler: 0,
            first_round: 0,
            delivery: Delivery::Late,
            timed: false,
        }
    }
}

/// What a serial run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct SerialRun {
    /// The next unused round number.
    pub rounds: u64,
    /// Blocks held by each worker at the end (ring routing; empty lists for star).
    pub held: Vec<Vec<BlockId>>,
}

fn tasks_for<T: Clone>(plan: Plan<T>, round: u64, p: usize) -> Result<Vec<T>, StradsError> {
    plan.into_tasks(p)
        .map_err(|tasks| StradsError::SerialPlanSize {
            round,
            tasks,
            workers: p,
        })
}

/// Runs `app` against star `workers` until it is done: a round's pushes happen when it is
/// dispatched, its commit goes to every worker when it is pulled, oldest first.
pub fn run_star<A, S, W>(
    app: &mut S,
    workers: &mut [W],
    opts: &SerialOptions,
) -> Result<SerialRun, StradsError>
where
    A: StradsApp,
    S: Schedule<A>,
    W: Push<A>,
{
    let (s, n) = (opts.scheduler, workers.len());
    if n == 0 {
        return Err(StradsError::SerialShape {
            workers: 0,
            lists: 0,
        });
    }
    let started = std::time::Instant::now();
    let elapsed = || {
        if opts.timed {
            started.elapsed()
        } else {
            Duration::ZERO
        }
    };
    let mut core = PipelineCore::starting_at(opts.depth, opts.first_round);
    let mut pending: VecDeque<(u64, Vec<A::Partial>)> = VecDeque::new();
    let mut waiting = false;
    loop {
        match core.next_action_after(waiting) {
            PipelineAction::Schedule(round) => {
                let step = app.schedule(round, core.in_flight());
                waiting = matches!(step, Step::Wait);
                core.scheduled(&step)?;
                if let Step::Run(plan) = step {
                    let tasks = tasks_for(plan, round, n)?;
                    let partials = workers
                        .iter_mut()
                        .zip(&tasks)
                        .enumerate()
                        .map(|(worker, (w, task))| {
                            w.push_from(s, round, task).map_err(|source| {
                                StradsError::SerialWorker {
                                    round,
                                    worker,
                                    source,
                                }
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    pending.push_back((round, partials));
                }
            }
            PipelineAction::AwaitOldest => {
                waiting = false;
                let (round, partials) =
                    pending.pop_front().ok_or(StradsModelError::PipelineEmpty)?;
                let aggregated = app
                    .pull(round, partials, elapsed())
                    .map_err(|source| StradsError::SerialPull { round, source })?;
                core.committed(round)?;
                for (worker, w) in workers.iter_mut().enumerate() {
                    w.commit_from(s, round, &aggregated).map_err(|source| {
                        StradsError::SerialWorker {
                            round,
                            worker,
                            source,
                        }
                    })?;
                }
            }
            PipelineAction::Stop => {
                return Ok(SerialRun {
                    rounds: core.next_round(),
                    held: vec![Vec::new(); n],
                });
            }
        }
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

enum SimEvent<T, B> {
    Dispatch {
        worker: usize,
        task: T,
    },
    Handoff {
        to: usize,
        id: BlockId,
        round: u64,
        from: u32,
        block: B,
    },
}

type SimCore<A> =
    RingCore<<A as StradsApp>::Task, <A as StradsApp>::Commit, <A as RingApp>::Block, usize>;

/// Applies every ready message of ring worker `w`: commits, and pushes whose handoffs go
/// to `transit` and whose partials go to `partials[slot]`.
fn drain_ring_worker<A: RingApp, W: RingPush<A>>(
    w: usize,
    core: &mut SimCore<A>,
    worker: &mut W,
    ring: usize,
    transit: &mut Vec<SimEvent<A::Task, A::Block>>,
    partials: &mut [Option<A::Partial>],
) -> Result<(), StradsError> {
    let index = w as u32;
    while let Some(ready) = core.next_ready().map_err(|p| p.reason)? {
        match ready {
            Ready::Commit { round, commit } => {
                worker
                    .commit(round, &commit)
                    .map_err(|source| StradsModelError::RingCommit {
                        worker: index,
                        round,
                        source: Box::new(source),
                    })?
            }
            Ready::Push {
                round,
                need,
                task,
                block,
                reply,
            } => {
                let out = worker.push(round, &task, block).map_err(|source| {
                    StradsModelError::RingPush {
                        worker: index,
                        round,
                        source: Box::new(source),
                    }
                })?;
                if let Some((to, id, block)) = settle(core, ring, round, need, out.block)? {
                    transit.push(SimEvent::Handoff {
                        to: to as usize,
                        id,
                        round,
                        from: index,
                        block,
                    });
                }
                match partials.get_mut(reply) {
                    Some(slot) => *slot = Some(out.partial),
                    None => {
                        return Err(StradsError::Deadlock {
                            round,
                            worker: w,
                            what: "answered a dispatch after its round's commit".into(),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Runs `app` against ring `workers` holding `initial` blocks, one round at a time, with
/// handoffs delivered in the order `delivery` asks for (see the module docs).
pub fn run_ring<A, S, W>(
    app: &mut S,
    workers: &mut [W],
    initial: Vec<Vec<(BlockId, A::Block)>>,
    delivery: Delivery,
) -> Result<SerialRun, StradsError>
where
    A: RingApp,
    S: Schedule<A>,
    W: RingPush<A>,
{
    let p = workers.len();
    if p == 0 || initial.len() != p {
        return Err(StradsError::SerialShape {
            workers: p,
            lists: initial.len(),
        });
    }
    let mut cores: Vec<SimCore<A>> = initial
        .into_iter()
        .enumerate()
        .map(|(w, blocks)| RingCore::new(w as u32, blocks))
        .collect::<Result<_, _>>()?;
    let mut transit: Vec<SimEvent<A::Task, A::Block>> = Vec::new();
    let mut seed = match delivery {
        Delivery::Late => 0,
        Delivery::Shuffled(s) => s,
    };
    let mut pipeline = PipelineCore::new(1);
    loop {
        let round = match pipeline.next_action() {
            PipelineAction::Schedule(r) => r,
            // Depth 1: every round is pulled within its own iteration.
            PipelineAction::AwaitOldest => return Err(StradsModelError::PipelineEmpty.into()),
            PipelineAction::Stop => break,
        };
        let step = app.schedule(round, pipeline.in_flight());
        pipeline.scheduled(&step)?;
        let Step::Run(plan) = step else {
            continue;
        };
        let mut events: Vec<SimEvent<A::Task, A::Block>> = tasks_for(plan, round, p)?
            .into_iter()
            .enumerate()
            .map(|(worker, task)| SimEvent::Dispatch { worker, task })
            .collect();
        events.append(&mut transit);
        if let Delivery::Shuffled(_) = delivery {
            for i in (1..events.len()).rev() {
                let j = (splitmix(&mut seed) % (i as u64 + 1)) as usize;
                events.swap(i, j);
            }
        }
        let mut partials: Vec<Option<A::Partial>> = (0..p).map(|_| None).collect();
        for event in events {
            match event {
                SimEvent::Dispatch { worker, task } => {
                    let need = A::block_needed(&task);
                    cores[worker]
                        .dispatch(round, need, task, worker)
                        .map_err(|e| e.reason)?;
                }
                SimEvent::Handoff {
                    to,
                    id,
                    round: produced,
                    from,
                    block,
                } => cores[to]
                    .handoff(id, block, produced, from)
                    .map_err(|e| e.reason)?,
            }
            for (w, (core, worker)) in cores.iter_mut().zip(workers.iter_mut()).enumerate() {
                drain_ring_worker(w, core, worker, p, &mut transit, &mut partials)?;
            }
            check_exclusive::<A>(&cores, &transit)?;
        }
        let mut done = Vec::with_capacity(p);
        for (w, partial) in partials.into_iter().enumerate() {
            match partial {
                Some(x) => done.push(x),
                None => return Err(deadlock::<A>(round, w, &cores, &transit)),
            }
        }
        let commit = app
            .pull(round, done, Duration::ZERO)
            .map_err(|source| StradsError::SerialPull { round, source })?;
        pipeline.committed(round)?;
        for (w, (core, worker)) in cores.iter_mut().zip(workers.iter_mut()).enumerate() {
            core.commit(round, commit.clone());
            // No dispatch is queued now, so nothing can answer into this empty slot list.
            drain_ring_worker(w, core, worker, p, &mut transit, &mut [])?;
        }
    }
    // Handoffs of the last round land too.
    for event in transit {
        if let SimEvent::Handoff {
            to,
            id,
            round,
            from,
            block,
        } = event
        {
            cores[to]
                .handoff(id, block, round, from)
                .map_err(|e| e.reason)?;
        }
    }
    Ok(SerialRun {
        rounds: pipeline.next_round(),
        held: cores.iter().map(RingCore::held_ids).collect(),
    })
}

fn check_exclusive<A: RingApp>(
    cores: &[SimCore<A>],
    transit: &[SimEvent<A::Task, A::Block>],
) -> Result<(), StradsError> {
    let mut seen: BTreeMap<BlockId, String> = BTreeMap::new();
    let places = cores
        .iter()
        .flat_map(|c| {
            c.held_ids()
                .into_iter()
                .map(|id| (id, format!("worker {}", c.worker())))
        })
        .chain(transit.iter().filter_map(|e| match e {
            SimEvent::Handoff { to, id, from, .. } => {
                Some((*id, format!("a handoff from worker {from} to worker {to}")))
            }
            SimEvent::Dispatch { .. } => None,
        }));
    for (id, place) in places {
        if let Some(first) = seen.insert(id, place.clone()) {
            return Err(StradsError::HeldTwice {
                block: id,
                first,
                second: place,
            });
        }
    }
    Ok(())
}

fn deadlock<A: RingApp>(
    round: u64,
    worker: usize,
    cores: &[SimCore<A>],
    transit: &[SimEvent<A::Task, A::Block>],
) -> StradsError {
    let Some(id) = cores[worker].waiting_for() else {
        return StradsError::Deadlock {
            round,
            worker,
            what: "never answered".into(),
        };
    };
    let place = cores
        .iter()
        .find(|c| c.holds(id))
        .map(|c| format!("held by worker {}", c.worker()))
        .or_else(|| {
            transit.iter().find_map(|e| match e {
                SimEvent::Handoff { to, id: b, .. } if *b == id => {
                    Some(format!("in transit to worker {to}"))
                }
                _ => None,
            })
        })
        .unwrap_or_else(|| "nowhere".into());
    StradsError::Deadlock {
        round,
        worker,
        what: format!("waits for block {id}, which is {place}"),
    }
}

#[cfg(test)]
pub(crate) mod tests;
