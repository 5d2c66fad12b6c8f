//! The roles built into the `petrel` binary: every node started by `petrel node` (and so
//! every node of `petrel run`) can run any of them. Each system adds its roles here.

use petrel_actors::{Cluster, Settings};
use std::sync::{Arc, OnceLock};

/// A cluster with every built-in role registered.
#[allow(clippy::let_and_return)] // one `let` per system, so systems merge independently
pub fn builtin(settings: Settings) -> Cluster {
    let cluster = Cluster::new(settings);
    // roles: demo
    let cluster = crate::demo::register(cluster);
    // roles: parameter server (issue 3) -- add `let cluster = ...::register(cluster);` below
    let cluster = crate::ps_mf::register_builtin(cluster);
    let cluster = crate::ps_lda::register_builtin(cluster);
    // roles: p3 (issue 4)
    let cluster = crate::p3_node::register(cluster);
    // roles: strads (issue 5)
    let cluster = petrel_algorithms::apps::lasso::register(cluster);
    let cluster = petrel_algorithms::apps::mf::register(cluster);
    let cluster = petrel_algorithms::apps::lda::register(cluster);
    let cluster = petrel_algorithms::apps::logistic::register(cluster);
    cluster
}

/// The job of a built-in app, built once per process from `[app.<section>]` on first use, so
/// all its roles on one node share it; a bad section fails every role with the reason.
pub fn lazy_job<C, J>(
    settings: Settings,
    section: &'static str,
    build: impl Fn(&Settings, C) -> Result<J, String> + Send + Sync + 'static,
) -> impl Fn() -> Result<Arc<J>, String> + Clone + Send + Sync + 'static
where
    C: serde::de::DeserializeOwned + Default,
    J: Send + Sync + 'static,
{
    let cell: Arc<OnceLock<Result<Arc<J>, String>>> = Arc::new(OnceLock::new());
    let build = Arc::new(build);
    move || {
        cell.get_or_init(|| {
            let cfg: C = settings.app(section).map_err(|e| e.to_string())?;
            build(&settings, cfg).map(Arc::new)
        })
        .clone()
    }
}
