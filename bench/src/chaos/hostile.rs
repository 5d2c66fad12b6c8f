//! Hostile members of `petrel bench chaos`: a thread that attacks the victim with a
//! stolen certificate, and what an armed member's own node logged of its attacks.

use super::link_cut::run_settings;
use super::{BenchError, stdout_file};
use petrel_net::hostile::Refusal;
use std::path::Path;
use std::time::Duration;

/// What an armed hostile member logged of each attack (`stall: disconnected (TooSlow) …`).
pub(super) fn member_attacks(out: &Path) -> Vec<String> {
    const SAID: &str = "hostile member attacked: ";
    [stdout_file(out), out.with_extension("stderr")]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            // The log line's fields (` node=… victim=…`) follow the message.
            let said = |l: &str| Some(l.split_once(SAID)?.1.split(" node=").next()?.to_string());
            text.lines().filter_map(said).collect::<Vec<_>>()
        })
        .collect()
}

/// A thread that attacks the victim with a stolen certificate until [`HostileMember::stop`].
pub(super) struct HostileMember {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<HostileOutcome>,
}

/// What became of a hostile member.
#[derive(Debug, Default)]
pub(super) struct HostileOutcome {
    pub(super) attempts: usize,
    pub(super) connected: usize,
    pub(super) refused: usize,
    pub(super) disconnected: usize,
    /// A connection still held open when the job ended.
    pub(super) held: bool,
    /// The last failure that was not a refusal.
    pub(super) error: Option<String>,
}

impl HostileOutcome {
    pub(super) fn record(&mut self, why: Option<Refusal>) {
        match why {
            Some(Refusal::StolenKey) => self.refused += 1,
            Some(Refusal::Hoarding | Refusal::TooSlow) => self.disconnected += 1,
            Some(Refusal::Impostor) | None => {}
        }
    }

    pub(super) fn label(&self) -> String {
        let mut parts = vec![format!("refused {}/{}", self.refused, self.attempts)];
        if self.disconnected > 0 {
            parts.push(format!("disconnected {}", self.disconnected));
        }
        if self.held {
            parts.push("held to the end".into());
        }
        if let Some(e) = &self.error {
            parts.push(e.clone());
        }
        format!(" ({})", parts.join(", "))
    }
}

impl HostileMember {
    /// Attacks `victim` with the certificate of `impostor`, from the run's `cluster.toml`.
    pub(super) fn start(
        out: &Path,
        victim: &str,
        impostor: &str,
    ) -> Result<HostileMember, BenchError> {
        let settings = run_settings(out)?;
        let nodes = &settings.nodes;
        let node = |name: &str| {
            (nodes.iter().position(|n| n.name == name))
                .ok_or_else(|| BenchError::Incomplete(format!("no node {name} in the run")))
        };
        let to: std::net::SocketAddr = nodes[node(victim)?]
            .addr
            .parse()
            .map_err(|e| BenchError::Incomplete(format!("{victim}'s address: {e}")))?;
        let impostor = node(impostor)?;
        let certs = settings
            .cluster
            .certs_dir
            .clone()
            .ok_or_else(|| BenchError::Incomplete("the run has no certs_dir".into()))?;
        let creds = petrel_net::ClusterCredentials::load(&certs, &nodes[impostor].name)
            .map_err(|e| BenchError::Incomplete(format!("a member's certificate: {e}")))?;
        let net = settings.net.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    return HostileOutcome {
                        error: Some(e.to_string()),
                        ..HostileOutcome::default()
                    };
                }
            };
            runtime.block_on(attack(creds, net, to, impostor as u32, stopped))
        });
        Ok(HostileMember { stop, thread })
    }

    pub(super) fn stop(self) -> HostileOutcome {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_else(|_| HostileOutcome {
            error: Some("the hostile member's thread panicked".into()),
            ..HostileOutcome::default()
        })
    }
}

/// Connects as `from`, opens five stalled 60 MiB frames, holds them until the victim
/// closes the connection, and comes back 200 ms later, until `stopped`.
async fn attack(
    creds: petrel_net::ClusterCredentials,
    net: petrel_net::NetConfig,
    to: std::net::SocketAddr,
    from: u32,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> HostileOutcome {
    use petrel_net::hostile::{
        StalledFrames, connect_as_member, open_stalled_frames, refusal, refusal_of,
    };
    let mut outcome = HostileOutcome::default();
    loop {
        let connected = tokio::select! {
            c = connect_as_member(&creds, &net, to) => c,
            _ = &mut stopped => return outcome,
        };
        outcome.attempts += 1;
        match connected {
            Err(e) => match refusal_of(&e) {
                Some(why) => outcome.record(Some(why)),
                None => outcome.error = Some(e.to_string()),
            },
            Ok((_endpoint, conn)) => {
                outcome.connected += 1;
                let frames = tokio::select! {
                    f = open_stalled_frames(&conn, from, StalledFrames::FIVE_OF_60_MIB) => f,
                    _ = &mut stopped => {
                        outcome.held = conn.close_reason().is_none();
                        return outcome;
                    }
                };
                tokio::select! {
                    closed = conn.closed() => outcome.record(refusal(&closed)),
                    _ = &mut stopped => {
                        outcome.held = frames.is_ok() && conn.close_reason().is_none();
                        return outcome;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = &mut stopped => return outcome,
        }
    }
}
