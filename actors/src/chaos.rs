//! Fault injection armed from outside: `PETREL_CHAOS_HOSTILE_MEMBER=<node>><victim>` (e.g.
//! `w0>scheduler`, set by `petrel bench chaos --faults hostile-member`) makes `<node>` attack
//! `<victim>` on each SIGUSR1 as [`petrel_net::hostile::misbehave`] does, logging what
//! became of each attack. Unset, nothing is armed.

use crate::error::NodeError;
use crate::node::Node;
use petrel_net::hostile::{Attack, misbehave};
use std::time::Duration;

/// The variable that arms a hostile member.
pub const HOSTILE_MEMBER_ENV: &str = "PETREL_CHAOS_HOSTILE_MEMBER";

/// How long each attack is held at most (the victim should close it within seconds).
const HOLD: Duration = Duration::from_secs(10);

/// `(attacker, victim)` from the variable's value.
fn parse(value: &str) -> Result<(&str, &str), NodeError> {
    match value.split_once('>') {
        Some((attacker, victim)) if !attacker.is_empty() && !victim.is_empty() => {
            Ok((attacker.trim(), victim.trim()))
        }
        _ => Err(NodeError::Config(format!(
            "{HOSTILE_MEMBER_ENV}={:?}: expected <node>><victim>, e.g. w0>scheduler",
            petrel_messages::clip(value, 200)
        ))),
    }
}

/// Arms `node` when the variable names it: a task that waits for SIGUSR1 and attacks, until
/// the node's transport closes. A malformed value or an unknown victim is refused.
pub(crate) fn arm(node: &Node) -> Result<(), NodeError> {
    let Ok(value) = std::env::var(HOSTILE_MEMBER_ENV) else {
        return Ok(());
    };
    let (attacker, victim) = parse(&value)?;
    if attacker != node.name() {
        return Ok(());
    }
    let victim_id = node.peer_id(victim).ok_or_else(|| {
        NodeError::Config(format!("{HOSTILE_MEMBER_ENV}: no node named {victim}"))
    })?;
    let net = node.net().clone();
    let name = node.name().to_string();
    let victim = victim.to_string();
    net.handle().spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut usr1 = match signal(SignalKind::user_defined1()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "hostile member not armed");
                return;
            }
        };
        tracing::warn!(node = %name, %victim, "hostile member armed (SIGUSR1 attacks)");
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        while !net.is_closed() {
            tokio::select! {
                _ = tick.tick() => continue,
                got = usr1.recv() => if got.is_none() { return },
            }
            // One line per attack as it ends: the job may finish before the last one.
            for attack in Attack::ALL {
                for outcome in misbehave(&net, victim_id, &[attack], HOLD).await {
                    tracing::warn!(node = %name, %victim, "hostile member attacked: {outcome}");
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_names_the_attacker_and_its_victim() {
        assert_eq!(parse("w0>scheduler").ok(), Some(("w0", "scheduler")));
        for bad in ["w0", ">scheduler", "w0>", ""] {
            let e = parse(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("expected <node>><victim>"), "{bad:?}: {e}");
        }
    }
}
