//! The roles built into the `petrel` binary: every node started by `petrel node` (and so
//! every node of `petrel run`) can run any of them. Each system adds its roles here.

use petrel_actors::{Cluster, Settings};

/// A cluster with every built-in role registered.
#[allow(clippy::let_and_return)] // one `let` per system, so systems merge independently
pub fn builtin(settings: Settings) -> Cluster {
    let cluster = Cluster::new(settings);
    // roles: demo
    let cluster = crate::demo::register(cluster);
    let cluster = crate::bench::ps::register(cluster);
    // roles: parameter server (issue 3) -- add `let cluster = ...::register(cluster);` below
    let cluster = petrel_ps::register_builtin::<petrel_ps::PsMf>(cluster);
    let cluster = petrel_ps::register_builtin::<petrel_ps::PsLda>(cluster);
    let cluster = petrel_ps::register_builtin::<petrel_ps::PsLr>(cluster);
    // roles: p3 (issue 4)
    let cluster = petrel_p3::roles::register(cluster);
    // roles: strads (issue 5)
    let cluster = petrel_strads::apps::lasso::register(cluster);
    let cluster = petrel_strads::apps::mf::register(cluster);
    let cluster = petrel_strads::apps::lda::register(cluster);
    let cluster = petrel_strads::apps::logistic::register(cluster);
    cluster
}
