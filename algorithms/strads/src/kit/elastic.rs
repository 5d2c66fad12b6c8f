//! Registration of the ring jobs whose workers join and leave (strads-mf, LDA).

use super::{StradsJob, scheduler_role, worker_role};
use crate::error::StradsError;
use petrel_actors::{Cluster, NodeContext};

/// Registers the roles of ring job `J` whose workers join and leave when `elastic(job)`
/// (its dealer deals over the workers of the moment). A worker's death
/// (`on_node_death = "leave"`) loses the blocks it holds, so it is refused, as is any
/// change of a job that is not elastic.
pub fn register_elastic_ring<J: StradsJob>(
    cluster: Cluster,
    elastic: fn(&J::Config) -> bool,
) -> Cluster {
    let check = move |ctx: &NodeContext, role: &str| -> Result<(), StradsError> {
        let job = ctx.settings.app::<J::Config>(J::SECTION)?;
        let death = ctx.settings.cluster.on_node_death == petrel_actors::OnNodeDeath::Leave;
        match ctx.settings.allows_membership_changes() && (death || !elastic(&job)) {
            true => Err(StradsError::FixedMembership {
                role: role.to_string(),
            }),
            false => Ok(()),
        }
    };
    cluster
        .app_section_checked::<J::Config, _>(J::SECTION, J::validate_config)
        .role(J::SCHEDULER_ROLE, move |ctx| async move {
            check(&ctx, J::SCHEDULER_ROLE)?;
            scheduler_role::<J>(ctx).await
        })
        .role(J::WORKER_ROLE, move |ctx| async move {
            check(&ctx, J::WORKER_ROLE)?;
            worker_role::<J>(ctx).await
        })
}
