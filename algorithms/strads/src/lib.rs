//! Scheduled model parallelism (STRADS): scheduler actors dispatch dependency-aware blocks
//! of variables to workers. One home that reads in order:
//!
//! 1. [`core`]: sans-I/O schedulers, dependency filters, worker states and aggregation for
//!    Lasso, sparse logistic regression, CCD++ matrix factorization and LDA. No actix.
//! 2. [`shells`]: the generic scheduler loop and worker actors (star and ring routing).
//! 3. [`kit`]: what apps share (outputs, loading off the event loop, the scheduler role).
//! 4. [`apps`]: the built-in apps and their roles; `petrel train` runs them.

pub mod apps;
pub mod core;
pub mod kit;
pub mod shells;
