//! The linear models' tuning constants, in one place. Each says what it trades and where it
//! was measured (BENCHMARKS.md); the settings that override some of them per job are in
//! `[app.lasso]` ([`LassoSettings`](crate::apps::lasso::LassoSettings)).

/// Full sweeps a coordinate-descent run (baseline or Gauss-Seidel) may take.
pub const MAX_FULL_SWEEPS: usize = 10_000;

/// Active-set passes between two full sweeps at most (one worker runs them all in one
/// round); a pass that barely moves the objective ends the phase long before.
pub const MAX_ACTIVE_PASSES: u32 = 1000;

/// Active-set passes per round with several Gauss-Seidel Lasso workers
/// (`gs_active_passes = 0`): fewer rounds than one pass for a few % more updates (more
/// passes cost many more updates).
pub const LASSO_SHARED_ACTIVE_PASSES: u32 = 4;

/// Active-set sweeps per active round with several Gauss-Seidel logistic workers
/// (`gs_active_passes = 0`): a block's own active phase between combinations runs ahead of
/// the others' and is partly undone.
pub const LOGISTIC_SHARED_ACTIVE_PASSES: u32 = 1;

/// Kept share of the workers' own progress at or above which the Gauss-Seidel full-sweep
/// chunk doubles ([`ChunkGrowth`](crate::core::gauss_seidel::ChunkGrowth)).
pub const CHUNK_GROW_AT: f64 = 0.95;

/// Kept share below which the Gauss-Seidel full-sweep chunk halves.
pub const CHUNK_SHRINK_BELOW: f64 = 0.8;

/// A proximal Newton step is kept if it lowers the objective by at least this share of the
/// model's predicted decrease ([`cd_step`](crate::core::loss::cd_step)); else the step
/// under the curvature bound is taken.
pub const NEWTON_ACCEPTANCE: f64 = 0.01;

/// Worker compute per non-zero of a coordinate's column (gather of the push, scatter of
/// the commit), in nanoseconds: measured on the benchmark machine.
pub const NS_PER_NONZERO: f64 = 4.0;

/// Scheduler work per coordinate (sampling, dependency check, pull, bytes), in ns.
pub const NS_PER_COORDINATE: f64 = 300.0;

/// Smallest automatic block size of the scheduled solver.
pub const MIN_AUTO_BLOCK: usize = 16;

/// Sweeps' worth of coordinate updates the scheduled solver's automatic round limit allows.
pub const AUTO_SWEEPS: u64 = 200;

/// The default `interference_bound`: off. On sparse designs a bound pays (see
/// [`RECOMMENDED_SPARSE_INTERFERENCE_BOUND`]); on dense ones every column loads every row,
/// so a block could hold only about `bound` columns: too loose to be on by default.
pub const DEFAULT_INTERFERENCE_BOUND: f32 = 0.0;

/// The bound that needed the fewest updates on sparse designs (`bench lasso-scale` uses
/// it); above the worst-case-safe 2, the Schur bound being loose for mixed-sign columns.
pub const RECOMMENDED_SPARSE_INTERFERENCE_BOUND: f32 = 3.0;

/// Weight of a new measurement in a worker's smoothed time per unit
/// ([`LoadBalancer`](crate::core::balance::LoadBalancer)): some twenty rounds to follow a
/// change; rounds timed +-30 % apart (a loaded machine) leave it within a few %.
pub const BALANCE_SMOOTHING: f64 = 0.1;

/// A re-deal is taken only if it shortens the predicted round by more than this share (a
/// re-deal costs a round and a rebuild of the moved rows, and noise must not thrash).
pub const BALANCE_MIN_GAIN: f64 = 0.05;

/// No worker's share falls below this share of an even one, so it stays measured.
pub const BALANCE_MIN_SHARE: f64 = 0.05;

/// Rounds every worker answers on its share before a re-deal is considered: the smoothed
/// times follow the new shares, and a noisy round cannot re-deal at once.
pub const BALANCE_SETTLE_ROUNDS: u32 = 8;
