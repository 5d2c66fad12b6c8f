//! One member must not be able to take the cluster down: while a member with a valid
//! certificate stalls, trickles or floods frames at control priority, another peer's
//! heartbeats keep reaching the node, and the member is disconnected and named well
//! within the cluster's failure timeout. Real QUIC on 127.0.0.1, default `[net]` settings
//! (a stalled frame is abandoned only after `frame_timeout_ms` = 30 s).

use bytes::Bytes;
use petrel_messages::runtime::Heartbeat;
use petrel_messages::{EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority, RemoteMessage};
use petrel_net::hostile::{
    Attack, Claimed, Refusal, StalledFrames, connect_as_member, flood_frames, misbehave,
    open_stalled_frames, refusal, trickle_frames,
};
use petrel_net::{ClusterCredentials, Inbound, Net, NetConfig, PeerAddr};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// True when `closed` says the node closed the connection for hoarding inbound budget.
fn closed_for_hoarding(closed: &quinn::ConnectionError) -> bool {
    matches!(refusal(closed), Some(Refusal::Hoarding | Refusal::TooSlow))
}

/// The actors runtime's default `failure_timeout_ms`: a peer silent this long is dead.
const FAILURE_TIMEOUT: Duration = Duration::from_millis(2000);
/// Longest a live peer's heartbeat may take to be heard while the attack goes on: inside
/// the failure timeout with a margin, and not so tight that a loaded machine fails it.
const HEARD_WITHIN: Duration = Duration::from_millis(1500);
/// The attacker must be disconnected this soon after it starts.
const DISCONNECTED_WITHIN: Duration = Duration::from_secs(4);

const NODE: NodeId = NodeId(1);
const ROGUE: u32 = 2;
const GOOD: NodeId = NodeId(3);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn heartbeat(seq: u64) -> Bytes {
    let header = EnvelopeHeader {
        from: GOOD,
        to: NODE,
        actor: petrel_messages::runtime::NODE_ACTOR.into(),
        msg_type: Heartbeat::TYPE_NAME.into(),
        priority: Priority::CONTROL,
        kind: EnvelopeKind::Tell,
    };
    Frame::encode(&header, &Heartbeat { node: GOOD, seq }).unwrap()
}

/// The node under attack, a live peer sending to it, and the rogue member's raw
/// connection to it.
struct Scene {
    node: Net,
    node_rx: Option<mpsc::Receiver<Inbound>>,
    good: Net,
    rogue: (quinn::Endpoint, quinn::Connection),
}

async fn scene() -> Scene {
    let cfg = NetConfig::default();
    let creds = ClusterCredentials::generate_cluster(&["node", "rogue", "good"]).unwrap();
    let (node, node_rx) = Net::quic(NODE, localhost(), &creds[0], cfg.clone()).unwrap();
    node.add_peer(NodeId(ROGUE), "rogue", PeerAddr::Quic(localhost()));
    node.add_peer(GOOD, "good", PeerAddr::Quic(localhost()));
    let addr = node.local_addr().unwrap();
    let (good, _good_rx) = Net::quic(GOOD, localhost(), &creds[2], cfg.clone()).unwrap();
    good.add_peer(NODE, "node", PeerAddr::Quic(addr));
    // The live peer is connected and heard before the attack starts.
    good.send(NODE, Priority::CONTROL, heartbeat(0)).unwrap();
    let rogue = connect_as_member(&creds[1], &cfg, addr).await.unwrap();
    let scene = Scene {
        node,
        node_rx: Some(node_rx),
        good,
        rogue,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while scene.node.last_heard(GOOD).is_none() {
        assert!(Instant::now() < deadline, "the live peer was never heard");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    scene
}

impl Scene {
    /// The node's runtime keeps up: every frame that arrives is taken and dropped.
    fn drain(&mut self) {
        if let Some(mut rx) = self.node_rx.take() {
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
        }
    }

    /// The live peer beats every 100 ms for `span`; each beat must be heard within
    /// [`HEARD_WITHIN`].
    async fn heartbeats_keep_flowing(&self, span: Duration) {
        let start = Instant::now();
        let mut seq = 1;
        while start.elapsed() < span {
            let sent = Instant::now();
            self.good
                .send(NODE, Priority::CONTROL, heartbeat(seq))
                .unwrap();
            loop {
                if self.node.last_heard(GOOD).is_some_and(|t| t >= sent) {
                    break;
                }
                assert!(
                    sent.elapsed() < HEARD_WITHIN,
                    "heartbeat {seq} of the live peer not heard after {:?} ({:?} into the \
                     attack; the failure timeout is {FAILURE_TIMEOUT:?}): {:?}",
                    sent.elapsed(),
                    start.elapsed(),
                    self.node.stats()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seq += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The rogue's connection was closed for holding budget without progress, within
    /// [`DISCONNECTED_WITHIN`] of `attack_started`, and the node names it.
    async fn rogue_is_disconnected_and_named(&self, attack_started: Instant) {
        let left = DISCONNECTED_WITHIN.saturating_sub(attack_started.elapsed());
        let closed = tokio::time::timeout(left, self.rogue.1.closed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the rogue member was not disconnected within {DISCONNECTED_WITHIN:?}: {:?}",
                    self.node.stats()
                )
            });
        assert!(closed_for_hoarding(&closed), "{closed:?}");
        let st = self.node.stats();
        assert_eq!(st.disconnected_peers, 1, "{st:?}");
        assert_eq!(st.disconnected_names, vec!["rogue".to_string()], "{st:?}");
    }
}

/// 128 frames of 64 KiB at control priority, 300 bytes of each sent, then silence: they
/// filled the node-wide 8 MiB control reserve, every heartbeat waited for a stalled frame
/// to be abandoned (30 s), and live nodes were declared dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_control_priority_frames_block_no_other_peers_heartbeats() {
    let mut s = scene().await;
    s.drain();
    let started = Instant::now();
    let stalled = open_stalled_frames(&s.rogue.1, ROGUE, StalledFrames::CONTROL_128_OF_64_KIB)
        .await
        .unwrap();
    s.heartbeats_keep_flowing(Duration::from_secs(3)).await;
    s.rogue_is_disconnected_and_named(started).await;
    drop(stalled);
}

/// The same 128 frames, each fed one byte a second: no frame is ever silent for long, so
/// a stall timer never fires, and none ever completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_control_priority_frames_block_no_other_peers_heartbeats() {
    let mut s = scene().await;
    s.drain();
    let started = Instant::now();
    let conn = s.rogue.1.clone();
    let trickler = tokio::spawn(async move {
        trickle_frames(
            &conn,
            ROGUE,
            StalledFrames::CONTROL_128_OF_64_KIB,
            Duration::from_secs(1),
        )
        .await
    });
    s.heartbeats_keep_flowing(Duration::from_secs(3)).await;
    s.rogue_is_disconnected_and_named(started).await;
    let closed = trickler.await.unwrap();
    assert!(closed_for_hoarding(&closed), "{closed:?}");
}

/// While the node's runtime is busy (nothing drains its inbound queue), a member floods
/// it with complete 64 KiB frames at control priority: application messages, and forged
/// heartbeats. Queued, they held the shared control reserve, and the live peer's
/// heartbeats could not be read, so it looked dead. Each peer's control frames now use
/// only that peer's reserve, and a frame that is not a control kind goes to the data lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_priority_flood_blocks_no_other_peers_heartbeats() {
    let s = scene().await;
    let flood = |claimed| StalledFrames {
        claimed,
        ..StalledFrames::CONTROL_128_OF_64_KIB
    };
    flood_frames(&s.rogue.1, ROGUE, flood(Claimed::Application), 150)
        .await
        .unwrap();
    flood_frames(&s.rogue.1, ROGUE, flood(Claimed::Heartbeat), 150)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.heartbeats_keep_flowing(Duration::from_secs(2)).await;
    let st = s.node.stats();
    assert_eq!(
        st.disconnected_peers, 0,
        "a flood of complete frames is served: {st:?}"
    );
    assert!(st.received_messages >= 150, "{st:?}");
}

/// A member whose own node goes bad attacks from its own socket, so the node admits it
/// (right certificate, right address): its stalled and trickled frames get it
/// disconnected within seconds, each time named, and its flood is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gone_bad_is_admitted_then_disconnected_for_stalling_and_trickling() {
    let cfg = NetConfig::default();
    let creds = ClusterCredentials::generate_cluster(&["node", "rogue"]).unwrap();
    let (node, mut node_rx) = Net::quic(NODE, localhost(), &creds[0], cfg.clone()).unwrap();
    let (rogue, _rogue_rx) = Net::quic(NodeId(ROGUE), localhost(), &creds[1], cfg).unwrap();
    let rogue_addr = rogue.local_addr().unwrap();
    node.add_peer(NodeId(ROGUE), "rogue", PeerAddr::Quic(rogue_addr));
    rogue.add_peer(NODE, "node", PeerAddr::Quic(node.local_addr().unwrap()));
    tokio::spawn(async move { while node_rx.recv().await.is_some() {} });
    let outcomes = misbehave(&rogue, NODE, &Attack::ALL, Duration::from_secs(6)).await;
    let got: Vec<(Attack, Option<Refusal>)> =
        outcomes.iter().map(|o| (o.attack, o.refused)).collect();
    assert!(
        matches!(
            got[..],
            [
                (Attack::Stall, Some(Refusal::Hoarding | Refusal::TooSlow)),
                (Attack::Trickle, Some(Refusal::Hoarding | Refusal::TooSlow)),
                (Attack::Flood, None),
            ]
        ),
        "{outcomes:?}"
    );
    for o in &outcomes[..2] {
        assert!(o.lasted < DISCONNECTED_WITHIN, "{o}");
    }
    assert!(outcomes[2].error.is_none(), "{}", outcomes[2]);
    let st = node.stats();
    assert_eq!(st.disconnected_names, ["rogue", "rogue"], "{st:?}");
}
