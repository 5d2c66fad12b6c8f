//! Workers that join and leave a running job: the clock a joiner starts at, and which
//! workers a job has now (a worker's data is its share by rank among them).

use crate::core::types::Clock;

/// What a joiner does with the shards' answers to its admission (each the clock that shard
/// admitted it at, `max(asked, its min clock)`): `Ok(clock)` when all agree, it starts
/// there; else `Err(largest)`, it asks every shard again with the largest answer (a shard
/// only raises it, and the largest lowers no shard's min clock).
pub fn admission(answers: &[Clock]) -> Result<Clock, Clock> {
    let top = answers.iter().copied().max().unwrap_or(0);
    match answers.iter().all(|&a| a == top) {
        true => Ok(top),
        false => Err(top),
    }
}

/// The ids of the current workers, sorted: those whose node (`worker_nodes[w]`) is a
/// member now, and the asking worker `me` always (its own node is a member while it runs).
pub fn current_workers(
    worker_nodes: &[String],
    is_member: impl Fn(&str) -> bool,
    me: Option<u32>,
) -> Vec<u32> {
    (0..worker_nodes.len() as u32)
        .filter(|&w| me == Some(w) || is_member(&worker_nodes[w as usize]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joiner_starts_where_every_shard_agrees_and_else_asks_with_the_largest() {
        assert_eq!(admission(&[4, 4, 4]), Ok(4));
        assert_eq!(admission(&[3, 5, 4]), Err(5));
        assert_eq!(admission(&[5, 5]), Ok(5));
    }

    #[test]
    fn the_current_workers_are_the_members_and_the_asker() {
        let nodes: Vec<String> = ["worker-0", "worker-1", "worker-2"]
            .map(String::from)
            .into();
        let members = ["worker-1", "worker-2", "shard-0"];
        let is_member = |n: &str| members.contains(&n);
        assert_eq!(current_workers(&nodes, is_member, Some(1)), [1, 2]);
        // A node not yet in this worker's view still counts itself.
        assert_eq!(
            current_workers(&nodes, |n| n == "worker-1", Some(0)),
            [0, 1]
        );
        // The monitor asks for no worker of its own.
        assert_eq!(current_workers(&nodes, |n| n == "worker-1", None), [1]);
    }
}
