//! The roles every `petrel node` can run; a binary built on [`crate::cli`] adds its own
//! with [`extend_builtin`].

use petrel_actors::{Cluster, Settings};
use std::sync::OnceLock;

static EXTRA: OnceLock<fn(Cluster) -> Cluster> = OnceLock::new();

/// Registers more roles in every [`builtin`] cluster of this process (first call wins).
pub fn extend_builtin(register: fn(Cluster) -> Cluster) {
    let _ = EXTRA.set(register);
}

/// A cluster with every built-in role registered.
pub fn builtin(settings: Settings) -> Cluster {
    let mut cluster = Cluster::new(settings);
    cluster = crate::demo::register(cluster);
    // The built-in apps deal their work to the members the job started with.
    cluster = cluster.registered_roles_need_fixed_membership();
    // Except the Lasso and logistic regression: their roles take joins and leaves with the
    // scheduled solver and dynamic dealing, and refuse them with anything else as they
    // start.
    cluster = petrel_strads::apps::lasso::register(cluster);
    cluster = petrel_strads::apps::logistic::register(cluster);
    // And strads-mf and lda with dynamic dealing (their roles refuse anything else as they
    // start).
    cluster = petrel_strads::apps::mf::register(cluster);
    cluster = petrel_strads::apps::lda::register(cluster);
    // And ps-mf, ps-lr and ps-lda: their workers join and leave (checked as their jobs
    // start).
    cluster = petrel_ps::register_builtin::<petrel_ps::PsMf>(cluster);
    cluster = petrel_ps::register_builtin::<petrel_ps::PsLr>(cluster);
    cluster = petrel_ps::register_builtin::<petrel_ps::PsLda>(cluster);
    // And P3's: its workers join and leave at iteration boundaries (the rest refused as
    // its roles start, `petrel_p3::roles::check_membership`).
    cluster = petrel_p3::roles::register(cluster);
    match EXTRA.get() {
        Some(register) => register(cluster),
        None => cluster,
    }
}
