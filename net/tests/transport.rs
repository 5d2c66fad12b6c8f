// Over 600 lines: the transport's end-to-end cases share one QUIC and memory harness.
//! Transport tests over real QUIC on 127.0.0.1 and over the in-memory hub.

use bytes::Bytes;
use petrel_messages::{EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use petrel_net::tls::ClusterCa;
use petrel_net::{ClusterCredentials, Inbound, MemoryHub, Net, NetConfig, PeerAddr, ShaperConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

fn frame(from: u32, to: u32, tag: &str, priority: Priority, body: &[u8]) -> Bytes {
    let header = EnvelopeHeader {
        from: NodeId(from),
        to: NodeId(to),
        actor: "sink".into(),
        msg_type: tag.into(),
        priority,
        kind: EnvelopeKind::Tell,
    };
    Frame::encode(&header, serde_bytes::Bytes::new(body)).unwrap()
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn recv(rx: &mut mpsc::Receiver<Inbound>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("timed out waiting for a frame")
        .expect("channel closed")
}

/// How many frames arrive on `rx` before the one of type `tag`.
async fn received_before(rx: &mut mpsc::Receiver<Inbound>, tag: &str) -> usize {
    let mut before = 0;
    while recv(rx).await.frame.header.msg_type != tag {
        before += 1;
    }
    before
}

/// Sends a `tag` frame from node `from` to node `to` at `priority`.
fn tell(net: &Net, from: u32, to: u32, tag: &str, priority: Priority, body: &[u8]) {
    let f = frame(from, to, tag, priority, body);
    net.send(NodeId(to), priority, f).unwrap();
}

/// A QUIC node `id` on 127.0.0.1 that knows `peers` (id, name, address).
fn quic_node(
    id: u32,
    creds: &ClusterCredentials,
    cfg: &NetConfig,
    peers: &[(u32, &str, SocketAddr)],
) -> (Net, mpsc::Receiver<Inbound>) {
    let (net, rx) = Net::quic(NodeId(id), localhost(), creds, cfg.clone()).unwrap();
    for &(peer, name, addr) in peers {
        net.add_peer(NodeId(peer), name, PeerAddr::Quic(addr));
    }
    (net, rx)
}

/// An in-memory node `id` on `hub`, running on the test's runtime.
fn memory_node(hub: &MemoryHub, id: u32) -> (Net, mpsc::Receiver<Inbound>) {
    let cfg = NetConfig {
        threads: 0,
        ..NetConfig::default()
    };
    Net::memory(hub, NodeId(id), cfg).unwrap()
}

fn pair(
    cfg: NetConfig,
) -> (
    (Net, mpsc::Receiver<Inbound>),
    (Net, mpsc::Receiver<Inbound>),
) {
    let creds = ClusterCredentials::generate_cluster(&["a", "b"]).unwrap();
    let a = quic_node(1, &creds[0], &cfg, &[]);
    let b = quic_node(2, &creds[1], &cfg, &[(1, "a", a.0.local_addr().unwrap())]);
    a.0.add_peer(NodeId(2), "b", PeerAddr::Quic(b.0.local_addr().unwrap()));
    (a, b)
}

/// Polls `done` every 20 ms for up to `secs` seconds; fails with `what()` if it never holds.
async fn wait_until(secs: u64, done: impl Fn() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing more arrives on `rx` within 300 ms.
async fn assert_quiet(rx: &mut mpsc::Receiver<Inbound>, what: &str) {
    let next = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
    assert!(next.is_err(), "{what}");
}

/// Settings with these message, inbound-budget and stall limits (the rest default).
fn budget_cfg(
    max_message_bytes: usize,
    inbound_buffer_bytes: usize,
    frame_timeout_ms: u64,
) -> NetConfig {
    NetConfig {
        max_message_bytes,
        inbound_buffer_bytes,
        frame_timeout_ms,
        ..NetConfig::default()
    }
}

/// Node `a` (id 1) expecting `rogue` (id `rogue`) and `good` (id 3) from 127.0.0.1, and a
/// raw QUIC connection to it holding rogue's certificate.
struct Rogue {
    creds: Vec<ClusterCredentials>,
    a: Net,
    a_rx: mpsc::Receiver<Inbound>,
    _endpoint: quinn::Endpoint,
    conn: quinn::Connection,
}

impl Rogue {
    async fn connect(cfg: &NetConfig, rogue: u32) -> Rogue {
        let creds = ClusterCredentials::generate_cluster(&["a", "rogue", "good"]).unwrap();
        let peers = [(rogue, "rogue", localhost()), (3, "good", localhost())];
        let (a, a_rx) = quic_node(1, &creds[0], cfg, &peers);
        let (_endpoint, conn) = rogue_connection(&creds[1], cfg, a.local_addr().unwrap()).await;
        Rogue {
            creds,
            a,
            a_rx,
            _endpoint,
            conn,
        }
    }

    /// The well-behaved member `good` (id 3), which knows `a`.
    fn good(&self, cfg: &NetConfig) -> (Net, mpsc::Receiver<Inbound>) {
        let a = (1, "a", self.a.local_addr().unwrap());
        quic_node(3, &self.creds[2], cfg, &[a])
    }
}

/// A large tensor crosses QUIC in many chunks, is never gathered, and decodes from the
/// chunks into exactly the values sent (every sign, exponent and NaN payload included).
#[tokio::test]
async fn a_large_tensor_arrives_in_chunks_and_decodes_bit_for_bit() {
    let ((a, _a_rx), (_b, mut b_rx)) = pair(NetConfig::default());
    let values: Vec<f32> = (0..1u32 << 20)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9E37_79B9)))
        .collect();
    let tensor = petrel_messages::Tensor::from_vec(values);
    let header = EnvelopeHeader {
        from: NodeId(1),
        to: NodeId(2),
        actor: "sink".into(),
        msg_type: "tensor".into(),
        priority: Priority::NORMAL,
        kind: EnvelopeKind::Tell,
    };
    let bytes = Frame::encode(&header, &tensor).unwrap();
    a.send(NodeId(2), Priority::NORMAL, bytes.clone()).unwrap();
    let got = recv(&mut b_rx).await;
    assert_eq!(got.len, bytes.len());
    assert!(got.frame.body.chunks().len() > 1, "{:?}", got.frame.body);
    assert_eq!(
        got.frame.body,
        Frame::decode(bytes, usize::MAX).unwrap().body
    );
    let back: petrel_messages::Tensor = got.frame.body.decode("tensor").unwrap();
    let bits = |t: &petrel_messages::Tensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(back.shape, tensor.shape);
    assert!(bits(&back) == bits(&tensor));
}

/// A frame given in pieces (a head and a tensor's own bytes) crosses QUIC as the same
/// bytes as the frame encoded into one buffer.
#[tokio::test]
async fn a_frame_sent_in_pieces_arrives_as_the_same_bytes() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Blob {
        tensor: petrel_messages::Tensor,
        tag: String,
    }
    impl petrel_messages::RemoteMessage for Blob {
        const TYPE_NAME: &'static str = "test.blob";
        type Reply = ();
        fn large_payload(&mut self) -> Option<&mut Vec<f32>> {
            Some(&mut self.tensor.data)
        }
    }
    let ((a, _a_rx), (_b, mut b_rx)) = pair(NetConfig::default());
    let header = EnvelopeHeader {
        from: NodeId(1),
        to: NodeId(2),
        actor: "sink".into(),
        msg_type: "test.blob".into(),
        priority: Priority::NORMAL,
        kind: EnvelopeKind::Tell,
    };
    let blob = || Blob {
        tensor: petrel_messages::Tensor::from_vec((0..300_000).map(|i| i as f32).collect()),
        tag: "end".into(),
    };
    let whole = Frame::encode(&header, &blob()).unwrap();
    let pieces = Frame::encode_chunks(&header, blob()).unwrap();
    assert_eq!(pieces.len(), 3);
    a.send_chunks(NodeId(2), Priority::NORMAL, pieces).unwrap();
    let got = recv(&mut b_rx).await;
    assert_eq!(got.len, whole.len());
    assert_eq!(
        got.frame.body,
        Frame::decode(whole, usize::MAX).unwrap().body
    );
    let back: Blob = got.frame.body.decode("test.blob").unwrap();
    assert_eq!((back.tensor, back.tag), (blob().tensor, blob().tag));
}

#[tokio::test]
async fn frames_cross_quic_both_ways() {
    let ((a, mut a_rx), (b, mut b_rx)) = pair(NetConfig::default());
    tell(&a, 1, 2, "hello", Priority::NORMAL, b"abc");
    let got = recv(&mut b_rx).await;
    assert_eq!(got.frame.header.msg_type, "hello");
    assert_eq!(got.frame.header.from, NodeId(1));
    tell(&b, 2, 1, "back", Priority::NORMAL, &vec![7u8; 3 << 20]);
    let got = recv(&mut a_rx).await;
    assert_eq!(got.frame.header.msg_type, "back");
    let body: serde_bytes::ByteBuf = got.frame.body.decode("back").unwrap();
    assert_eq!(body.len(), 3 << 20);
    assert!(body.iter().all(|&x| x == 7));
}

#[tokio::test]
async fn frames_cross_memory_hub() {
    let hub = MemoryHub::new();
    let (a, _a_rx) = memory_node(&hub, 1);
    let (_b, mut b_rx) = memory_node(&hub, 2);
    for i in 0..10u8 {
        tell(&a, 1, 2, "m", Priority::NORMAL, &[i]);
    }
    for i in 0..10u8 {
        let got = recv(&mut b_rx).await;
        let body: serde_bytes::ByteBuf = got.frame.body.decode("m").unwrap();
        assert_eq!(body.as_slice(), &[i]);
    }
}

#[tokio::test]
async fn node_with_foreign_credentials_is_refused() {
    let cfg = NetConfig {
        connect_timeout_ms: 2000,
        ..NetConfig::default()
    };
    let ours = ClusterCredentials::generate_cluster(&["a"]).unwrap();
    let theirs = ClusterCa::generate().unwrap().issue("intruder").unwrap();
    let (a, mut a_rx) = quic_node(1, &ours[0], &cfg, &[]);
    let (intruder, _rx) = quic_node(9, &theirs, &cfg, &[(1, "a", a.local_addr().unwrap())]);
    tell(&intruder, 9, 1, "evil", Priority::NORMAL, b"x");
    let failures = || intruder.stats().send_failures;
    wait_until(
        10,
        || failures() > 0,
        || "the intruder's send must fail".into(),
    )
    .await;
    assert_eq!(failures(), 1, "the intruder's send must fail once");
    // The intruder can see its failure before `a` has counted the refusal.
    let refused = || a.stats().refused_connections >= 1;
    wait_until(10, refused, || "the handshake must be refused".into()).await;
    assert_quiet(&mut a_rx, "nothing delivered").await;
    assert_eq!(a.stats().received_messages, 0);
}

/// A member that speaks raw QUIC and sends garbage, oversize and truncated streams: the
/// node counts them and keeps serving a well-behaved peer.
#[tokio::test]
async fn garbage_oversize_and_truncated_streams_do_not_stall_a_node() {
    let cfg = NetConfig {
        max_message_bytes: 1 << 20,
        inbound_buffer_bytes: 2 << 20,
        ..NetConfig::default()
    };
    let mut r = Rogue::connect(&cfg, 5).await;
    let conn = &r.conn;
    // 1. pure garbage
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&[0x5a; 64]).await.unwrap();
    s.finish().unwrap();
    // Streams start with a lane header (sender, priority, epoch, sequence).
    let lane = |seq| {
        petrel_net::sequencer::LaneHeader {
            from: 5,
            priority: petrel_messages::Priority(0),
            epoch: 1,
            seq,
        }
        .encode()
    };
    // 2. a prefix announcing 100 MiB
    let mut s = conn.open_uni().await.unwrap();
    let mut prefix = lane(0).to_vec();
    prefix.extend_from_slice(b"PTR1");
    prefix.extend_from_slice(&10u32.to_le_bytes());
    prefix.extend_from_slice(&(100u32 << 20).to_le_bytes());
    s.write_all(&prefix).await.unwrap();
    let _ = s.finish();
    // 3. a valid frame cut short
    let good = frame(5, 1, "cut", Priority::NORMAL, &[1u8; 1000]);
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&lane(1)).await.unwrap();
    s.write_all(&good[..good.len() / 2]).await.unwrap();
    s.finish().unwrap();
    // 4. a valid header with an undecodable header section
    let mut bad_header = lane(2).to_vec();
    bad_header.extend_from_slice(b"PTR1");
    bad_header.extend_from_slice(&4u32.to_le_bytes());
    bad_header.extend_from_slice(&0u32.to_le_bytes());
    bad_header.extend_from_slice(&[0xc1, 0xc1, 0xc1, 0xc1]);
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&bad_header).await.unwrap();
    s.finish().unwrap();

    // A well-behaved member is still served.
    let (good_node, _rx) = r.good(&cfg);
    tell(&good_node, 3, 1, "fine", Priority::NORMAL, b"ok");
    let got = recv(&mut r.a_rx).await;
    assert_eq!(got.frame.header.msg_type, "fine");

    let counted = || {
        let st = r.a.stats();
        st.malformed_frames >= 2 && st.oversize_frames >= 1 && st.truncated_streams >= 1
    };
    let st = || format!("counters not bumped: {:?}", r.a.stats());
    wait_until(5, counted, st).await;
    // A send over what the peer takes even split (its 1 MiB share of the 2 MiB inbound
    // budget) is refused locally, before it costs bandwidth.
    assert!(
        good_node
            .send(
                NodeId(1),
                Priority::NORMAL,
                frame(3, 1, "big", Priority::NORMAL, &vec![0u8; 2 << 20])
            )
            .is_err()
    );
}

/// On a shaped link, a high-priority message queued behind a large low-priority backlog
/// arrives long before the backlog has drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_overtakes_backlog_on_shaped_link() {
    let cfg = NetConfig {
        shaper: Some(ShaperConfig::mbit(40.0)),
        ..NetConfig::default()
    };
    let ((a, _a_rx), (_b, mut b_rx)) = pair(cfg);
    // Warm the connection up.
    tell(&a, 1, 2, "warm", Priority::NORMAL, b"w");
    recv(&mut b_rx).await;
    let chunk = vec![0u8; 512 << 10];
    let backlog = 40; // 20 MiB = 4 s at 40 Mbit/s
    for _ in 0..backlog {
        tell(&a, 1, 2, "bulk", Priority::LOW, &chunk);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    tell(&a, 1, 2, "urgent", Priority::HIGH, b"now");
    let bulk_before = received_before(&mut b_rx, "urgent").await;
    let latency = sent.elapsed();
    assert!(
        bulk_before < backlog / 2,
        "urgent message waited behind {bulk_before} bulk frames"
    );
    assert!(
        latency < Duration::from_millis(1500),
        "urgent latency {latency:?}"
    );
}

/// A member that announces frames and then stalls cannot pin the receiver's inbound
/// budget: stalled frames are abandoned after `frame_timeout_ms`, and other peers are
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_partial_frames_release_the_inbound_budget() {
    let cfg = budget_cfg(1 << 20, 2 << 20, 500);
    let mut r = Rogue::connect(&cfg, 5).await;
    let mut stalled = Vec::new();
    for seq in 0..8u64 {
        let mut s = r.conn.open_uni().await.unwrap();
        let mut head = petrel_net::sequencer::LaneHeader {
            from: 5,
            priority: petrel_messages::Priority(0),
            epoch: 1,
            seq,
        }
        .encode()
        .to_vec();
        head.extend_from_slice(b"PTR1");
        head.extend_from_slice(&16u32.to_le_bytes());
        head.extend_from_slice(&((1u32 << 20) - 100).to_le_bytes());
        head.extend_from_slice(&[0u8; 1000]); // a little of the body, then silence
        s.write_all(&head).await.unwrap();
        stalled.push(s); // kept open: never finished
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (good, _rx) = r.good(&cfg);
    let started = Instant::now();
    tell(&good, 3, 1, "fine", Priority::NORMAL, &[9u8; 600_000]);
    let got = recv(&mut r.a_rx).await;
    assert_eq!(got.frame.header.msg_type, "fine");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "served after {:?}",
        started.elapsed()
    );
    let abandoned = || r.a.stats().truncated_streams >= 8;
    let st = || format!("stalled frames not abandoned: {:?}", r.a.stats());
    wait_until(5, abandoned, st).await;
    drop(stalled);
}

/// The authentication matrix's remaining case: a client that trusts the cluster CA but
/// presents no certificate is refused.
#[tokio::test]
async fn client_without_certificate_is_refused() {
    let cfg = NetConfig::default();
    let ca = ClusterCa::generate().unwrap();
    let member = ca.issue("a").unwrap();
    let (a, mut a_rx) = Net::quic(NodeId(1), localhost(), &member, cfg).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(member.ca.clone()).unwrap();
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![petrel_net::tls::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut ep = quinn::Endpoint::client(localhost()).unwrap();
    ep.set_default_client_config(quinn::ClientConfig::new(std::sync::Arc::new(crypto)));
    let attempt = async {
        let conn = ep
            .connect(
                a.local_addr().unwrap(),
                petrel_net::tls::CLUSTER_SERVER_NAME,
            )
            .unwrap()
            .await?;
        let mut s = conn.open_uni().await?;
        s.write_all(&frame(9, 1, "anon", Priority::NORMAL, b"x"))
            .await?;
        s.finish()?;
        conn.closed().await;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), attempt).await;
    let refused = || a.stats().refused_connections > 0;
    let why = || "handshake without a certificate was not refused".into();
    wait_until(5, refused, why).await;
    assert_quiet(&mut a_rx, "nothing delivered").await;
    assert_eq!(a.stats().received_messages, 0);
}

/// A send that fails (the peer is not there yet) must not leave a hole that holds back
/// the next messages of the same lane.
#[tokio::test]
async fn failed_send_does_not_stall_the_lane() {
    let hub = MemoryHub::new();
    let (a, _a_rx) = memory_node(&hub, 1);
    tell(&a, 1, 2, "lost", Priority::CONTROL, b"1");
    let failed = || a.stats().send_failures > 0;
    wait_until(5, failed, || "the send did not fail".into()).await;
    let (_b, mut b_rx) = memory_node(&hub, 2);
    tell(&a, 1, 2, "next", Priority::CONTROL, b"2");
    let got = tokio::time::timeout(Duration::from_millis(1000), b_rx.recv())
        .await
        .expect("the lane stalled behind the failed send")
        .unwrap();
    assert_eq!(got.frame.header.msg_type, "next");
}

/// Five streams from `conn`, each announcing a 60 MiB frame and sending 300 bytes of it.
async fn open_stalled_60_mib_frames(conn: &quinn::Connection) -> Vec<quinn::SendStream> {
    petrel_net::hostile::open_stalled_frames(
        conn,
        2,
        petrel_net::hostile::StalledFrames::FIVE_OF_60_MIB,
    )
    .await
    .unwrap()
}

async fn rogue_connection(
    creds: &ClusterCredentials,
    cfg: &NetConfig,
    to: SocketAddr,
) -> (quinn::Endpoint, quinn::Connection) {
    petrel_net::hostile::connect_as_member(creds, cfg, to)
        .await
        .unwrap()
}

/// A member opens five streams that each announce a 60 MiB frame and send a few hundred
/// bytes. Were they to pin the node's whole 256 MiB inbound budget, every read would stop
/// (heartbeats included) and the cluster would die of "no heartbeat". The hoarder pins at
/// most its own share, and another peer's data and control frames are read. The stall
/// timeout is a minute, so nothing the hoarder holds is released during the test: without
/// per-peer shares, `recv` below times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_stalled_60_mib_frames_from_a_member_block_nobody_else() {
    let cfg = budget_cfg(64 << 20, 256 << 20, 60_000);
    let mut r = Rogue::connect(&cfg, 2).await;
    let hoarding = open_stalled_60_mib_frames(&r.conn).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (good, _good_rx) = r.good(&cfg);
    for i in 0..10 {
        let data = frame(
            3,
            1,
            &format!("data{i}"),
            Priority::NORMAL,
            &vec![1u8; 256 << 10],
        );
        good.send(NodeId(1), Priority::NORMAL, data).unwrap();
        let beat = frame(3, 1, &format!("beat{i}"), Priority::CONTROL, b"hb");
        good.send(NodeId(1), Priority::CONTROL, beat).unwrap();
    }
    for _ in 0..20 {
        let inbound = recv(&mut r.a_rx).await;
        assert_eq!(inbound.frame.header.from, NodeId(3));
    }
    drop(hoarding);
}

/// A member that keeps stalling frames is disconnected, with the code that says why, and
/// counted in `disconnected_peers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_keeps_stalling_frames_is_disconnected() {
    let cfg = budget_cfg(64 << 20, 256 << 20, 300);
    let r = Rogue::connect(&cfg, 2).await;
    let hoarding = open_stalled_60_mib_frames(&r.conn).await;
    let closed = tokio::time::timeout(Duration::from_secs(30), r.conn.closed())
        .await
        .expect("hoarding peer was never disconnected");
    assert!(
        matches!(closed, quinn::ConnectionError::ApplicationClosed(ref c) if c.error_code == quinn::VarInt::from_u32(5)),
        "{closed:?}"
    );
    let st = r.a.stats();
    assert_eq!(st.disconnected_peers, 1, "{st:?}");
    assert!(st.truncated_streams >= 3, "{st:?}");
    drop(hoarding);
}

/// The stolen key: a member holding w0's key connects to the victim as w0, from its own
/// address, over connection after connection, each opening five streams that announce a
/// 60 MiB frame and stall, while the real w0 sends the victim a stream of messages. All
/// connections of one certified name draw on one share, so were they accepted the real
/// w0's messages would wait behind the stalled frames for two `frame_timeout_ms` (a minute
/// each here: `recv` would time out). A certificate is accepted only from its node's
/// registered address: every connection of the stolen key is refused at once, with a
/// reason naming w0, and every honest message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_key_cannot_hold_up_its_owners_traffic() {
    use petrel_net::hostile::{
        Refusal, StalledFrames, connect_as_member, open_stalled_frames, refusal,
    };
    let cfg = budget_cfg(64 << 20, 256 << 20, 60_000);
    let creds = ClusterCredentials::generate_cluster(&["victim", "w0"]).unwrap();
    let (victim, mut victim_rx) = quic_node(0, &creds[0], &cfg, &[]);
    let victim_addr = victim.local_addr().unwrap();
    let (w0, _w0_rx) = quic_node(1, &creds[1], &cfg, &[(0, "victim", victim_addr)]);
    victim.add_peer(NodeId(1), "w0", PeerAddr::Quic(w0.local_addr().unwrap()));
    let data = |i: usize| {
        frame(
            1,
            0,
            &format!("data{i}"),
            Priority::NORMAL,
            &[3u8; 256 << 10],
        )
    };
    w0.send(NodeId(0), Priority::NORMAL, data(0)).unwrap();
    assert_eq!(recv(&mut victim_rx).await.frame.header.msg_type, "data0");

    // The attacker keeps coming back with new connections while w0 sends.
    const ATTEMPTS: usize = 6;
    let (stolen, attack_cfg) = (creds[1].clone(), cfg.clone());
    let attacker = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for _ in 0..ATTEMPTS {
            let (endpoint, conn) = match connect_as_member(&stolen, &attack_cfg, victim_addr).await
            {
                Ok(c) => c,
                Err(e) => {
                    outcomes.push((None, e.to_string()));
                    continue;
                }
            };
            let frames = open_stalled_frames(&conn, 1, StalledFrames::FIVE_OF_60_MIB).await;
            let closed = tokio::time::timeout(Duration::from_secs(30), conn.closed())
                .await
                .expect("the stolen key's connection was never refused");
            outcomes.push((refusal(&closed), closed.to_string()));
            drop((frames, endpoint));
        }
        outcomes
    });
    let refused = || victim.stats().refused_connections > 0;
    wait_until(30, refused, || format!("{:?}", victim.stats())).await;
    const HONEST: usize = 40;
    for i in 1..=HONEST {
        w0.send(NodeId(0), Priority::NORMAL, data(i)).unwrap();
        let beat = frame(1, 0, &format!("beat{i}"), Priority::CONTROL, b"hb");
        w0.send(NodeId(0), Priority::CONTROL, beat).unwrap();
    }
    // Every honest message arrives, each well within the minute a stalled frame holds its
    // budget (`recv` gives each 10 s), and those of one lane in order.
    let mut data_seen = Vec::new();
    let mut beats = 0;
    for _ in 0..2 * HONEST {
        let inbound = recv(&mut victim_rx).await;
        assert_eq!(inbound.frame.header.from, NodeId(1));
        let tag = inbound.frame.header.msg_type.clone();
        match tag.strip_prefix("data") {
            Some(i) => data_seen.push(i.parse::<usize>().unwrap()),
            None => beats += 1,
        }
    }
    assert_eq!(data_seen, (1..=HONEST).collect::<Vec<_>>());
    assert_eq!(beats, HONEST);

    let outcomes = attacker.await.unwrap();
    assert_eq!(outcomes.len(), ATTEMPTS);
    for (why, text) in &outcomes {
        // Refused at the handshake or just after, the reason naming whose key it is.
        assert!(why.is_none_or(|w| w == Refusal::StolenKey), "{outcomes:?}");
        assert!(
            text.contains("w0's certificate used from another address"),
            "{outcomes:?}"
        );
    }
    let st = victim.stats();
    assert!(st.refused_connections >= ATTEMPTS as u64, "{st:?}");
    assert_eq!(
        st.disconnected_peers, 0,
        "the real w0 was never cut off: {st:?}"
    );
    assert_eq!(st.received_messages, 1 + 2 * HONEST as u64, "{st:?}");
}

/// The address binding admits a node that listens on the unspecified address (`0.0.0.0`):
/// its connections come from whichever local IP routes to the peer, from its own port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_bound_to_the_unspecified_address_is_admitted_from_its_port() {
    let cfg = NetConfig::default();
    let creds = ClusterCredentials::generate_cluster(&["victim", "w0"]).unwrap();
    let (victim, mut victim_rx) = quic_node(0, &creds[0], &cfg, &[]);
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let (w0, _w0_rx) = Net::quic(NodeId(1), any, &creds[1], cfg).unwrap();
    let w0_addr = w0.local_addr().unwrap();
    assert!(w0_addr.ip().is_unspecified() && w0_addr.port() != 0);
    victim.add_peer(NodeId(1), "w0", PeerAddr::Quic(w0_addr));
    w0.add_peer(
        NodeId(0),
        "victim",
        PeerAddr::Quic(victim.local_addr().unwrap()),
    );
    tell(&w0, 1, 0, "from-any", Priority::NORMAL, b"ok");
    assert_eq!(recv(&mut victim_rx).await.frame.header.msg_type, "from-any");
    assert_eq!(victim.stats().refused_connections, 0);
}

/// A member holding a valid certificate for `a` claims to be `b`, once in
/// every header and once only in the envelope. Both forged frames are refused and counted,
/// and the honest `a` and `b` are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_claiming_another_members_name_is_refused() {
    let cfg = NetConfig::default();
    let creds = ClusterCredentials::generate_cluster(&["a", "b", "c"]).unwrap();
    let (c, mut c_rx) = quic_node(
        3,
        &creds[2],
        &cfg,
        &[(1, "a", localhost()), (2, "b", localhost())],
    );
    let c_peer = [(3, "c", c.local_addr().unwrap())];

    // a's certificate, b's id: lane header and envelope both say b.
    let (posing_as_b, _rx) = quic_node(2, &creds[0], &cfg, &c_peer);
    tell(&posing_as_b, 2, 3, "forged-b", Priority::CONTROL, b"x");
    // a's certificate and id on the lane, but the envelope claims b.
    let (a_lying, _rx) = quic_node(1, &creds[0], &cfg, &c_peer);
    tell(&a_lying, 2, 3, "forged-envelope", Priority::CONTROL, b"x");
    let forged = || c.stats().impostor_frames >= 2;
    wait_until(10, forged, || format!("{:?}", c.stats())).await;

    let (a, _a_rx) = quic_node(1, &creds[0], &cfg, &c_peer);
    let (b, _b_rx) = quic_node(2, &creds[1], &cfg, &c_peer);
    for (net, from, tag) in [(&a, 1, "honest-a"), (&b, 2, "honest-b")] {
        tell(net, from, 3, tag, Priority::NORMAL, b"ok");
    }
    let mut got: Vec<(NodeId, String)> = Vec::new();
    for _ in 0..2 {
        let inbound = recv(&mut c_rx).await;
        got.push((inbound.frame.header.from, inbound.frame.header.msg_type));
    }
    got.sort();
    assert_eq!(
        got,
        vec![
            (NodeId(1), "honest-a".into()),
            (NodeId(2), "honest-b".into())
        ]
    );
    assert_quiet(&mut c_rx, "nothing forged delivered").await;
    let st = c.stats();
    assert_eq!(st.impostor_frames, 2, "{st:?}");
    assert_eq!(st.received_messages, 2, "{st:?}");
}

/// A dialler reaches only the holder of the named node's certificate: a member listening
/// at b's address with a's certificate is not taken for b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_a_node_reaches_only_that_nodes_certificate() {
    let cfg = NetConfig {
        connect_timeout_ms: 2000,
        ..NetConfig::default()
    };
    let creds = ClusterCredentials::generate_cluster(&["a", "b"]).unwrap();
    let (a, _a_rx) = quic_node(1, &creds[0], &cfg, &[]);
    let a_peer = [(1, "a", a.local_addr().unwrap())];
    let (squatter, mut squatter_rx) = quic_node(2, &creds[0], &cfg, &a_peer);
    a.add_peer(
        NodeId(2),
        "b",
        PeerAddr::Quic(squatter.local_addr().unwrap()),
    );
    tell(&a, 1, 2, "for-b", Priority::NORMAL, b"x");
    let failed = || a.stats().send_failures > 0;
    wait_until(10, failed, || format!("{:?}", a.stats())).await;
    assert_quiet(&mut squatter_rx, "nothing reached the squatter").await;
}

/// A frame three times `max_message_bytes` is split by the sender's
/// transport and joined by the receiver's, over QUIC; a frame beyond a peer's share of the
/// inbound budget is refused at send, naming that limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_three_times_the_limit_crosses_quic_in_parts() {
    let cfg = NetConfig {
        max_message_bytes: 1 << 20,
        inbound_buffer_bytes: 16 << 20,
        ..NetConfig::default()
    };
    let ((a, _a_rx), (_b, mut b_rx)) = pair(cfg);
    let body: Vec<u8> = (0..3usize << 20).map(|i| (i % 253) as u8).collect();
    let big = frame(1, 2, "big", Priority::NORMAL, &body);
    assert!(big.len() > 3 << 20);
    a.send(NodeId(2), Priority::NORMAL, big.clone()).unwrap();
    tell(&a, 1, 2, "after", Priority::NORMAL, b"x");
    let got = recv(&mut b_rx).await;
    assert_eq!(got.frame.header.msg_type, "big");
    assert_eq!(got.frame.header.from, NodeId(1));
    assert_eq!(got.frame.body, Frame::decode(big, 4 << 20).unwrap().body);
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "after");
    assert_eq!(a.stats().split_messages, 1);
    assert_eq!(a.max_send_bytes(), 8 << 20);
    let too_big = frame(1, 2, "too-big", Priority::NORMAL, &vec![0u8; 9 << 20]);
    assert!(matches!(
        a.send(NodeId(2), Priority::NORMAL, too_big),
        Err(petrel_net::NetError::Oversize { max, .. }) if max == 8 << 20
    ));
}

/// A frame above `stripe_min_bytes` is cut into parts that travel over several
/// connections at once and is delivered whole, in lane order with the frames around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_frame_is_striped_over_three_connections_and_arrives_whole_in_order() {
    let cfg = NetConfig {
        stripe_connections: 3,
        stripe_min_bytes: 1 << 20,
        ..NetConfig::default()
    };
    let ((a, _a_rx), (_b, mut b_rx)) = pair(cfg);
    let body: Vec<u8> = (0..3usize << 20).map(|i| (i % 251) as u8).collect();
    let big = frame(1, 2, "big", Priority::NORMAL, &body);
    for f in [
        frame(1, 2, "before", Priority::NORMAL, b"x"),
        big.clone(),
        frame(1, 2, "after", Priority::NORMAL, b"y"),
    ] {
        a.send(NodeId(2), Priority::NORMAL, f).unwrap();
    }
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "before");
    let got = recv(&mut b_rx).await;
    assert_eq!(got.frame.header.msg_type, "big");
    assert_eq!(got.frame.body, Frame::decode(big, 4 << 20).unwrap().body);
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "after");
    let st = a.stats();
    assert_eq!(st.striped_messages, 1, "{st:?}");
    assert_eq!(st.split_messages, 0, "{st:?}");
    assert_eq!(st.opened_connections, 3, "{st:?}");
    // Small frames are never striped.
    let small = NetConfig::default().stripe_min_bytes - 1;
    tell(&a, 1, 2, "small", Priority::NORMAL, &vec![0u8; small - 200]);
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "small");
    assert_eq!(a.stats().striped_messages, 1);
}

/// A small high-priority message sent behind 64 MiB of striped low-priority
/// messages is delivered before that backlog is through (the outbox admits it at once
/// and QUIC's stream priority lets it overtake on its connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_passes_a_striped_backlog() {
    let cfg = NetConfig {
        stripe_connections: 2,
        ..NetConfig::default()
    };
    let ((a, _a_rx), (_b, mut b_rx)) = pair(cfg);
    let blob = vec![3u8; 4 << 20];
    let backlog = 16;
    for i in 0..backlog {
        tell(&a, 1, 2, &format!("bulk{i}"), Priority::LOW, &blob);
    }
    // Let the backlog reach the wire first.
    let first = recv(&mut b_rx).await;
    assert_eq!(first.frame.header.msg_type, "bulk0");
    tell(&a, 1, 2, "urgent", Priority::HIGH, b"now");
    let bulk_before_urgent = 1 + received_before(&mut b_rx, "urgent").await;
    assert!(
        bulk_before_urgent < backlog,
        "the urgent message waited for the whole striped backlog"
    );
    assert_eq!(a.stats().striped_messages, backlog as u64);
}

/// Between two nodes of one host with `shared_memory_dir` set, a large
/// frame travels through a file and a small control frame, arrives whole and in lane order
/// with the QUIC frames around it (both ways), and leaves no file behind. Frames below
/// `shared_memory_min_bytes` stay on QUIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_between_co_located_nodes_go_through_shared_memory_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = NetConfig {
        shared_memory_dir: Some(dir.path().to_path_buf()),
        shared_memory_min_bytes: 1 << 20,
        ..NetConfig::default()
    };
    let ((a, mut a_rx), (b, mut b_rx)) = pair(cfg);
    let body: Vec<u8> = (0..3usize << 20).map(|i| (i % 251) as u8).collect();
    let big = frame(1, 2, "big", Priority::NORMAL, &body);
    for f in [
        frame(1, 2, "before", Priority::NORMAL, b"x"),
        big.clone(),
        frame(1, 2, "after", Priority::NORMAL, b"y"),
        big.clone(),
    ] {
        a.send(NodeId(2), Priority::NORMAL, f).unwrap();
    }
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "before");
    let got = recv(&mut b_rx).await;
    assert_eq!(got.frame.header.msg_type, "big");
    assert_eq!(got.frame.header.from, NodeId(1));
    assert_eq!(
        got.frame.body,
        Frame::decode(big.clone(), 4 << 20).unwrap().body
    );
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "after");
    let second = recv(&mut b_rx).await;
    assert_eq!(second.frame.body, got.frame.body);
    assert_eq!(a.stats().shared_memory_messages, 2);
    // The other way, and a frame under the threshold stays on QUIC.
    let reply = frame(2, 1, "reply", Priority::HIGH, &body);
    b.send(NodeId(1), Priority::HIGH, reply).unwrap();
    let small = frame(2, 1, "small", Priority::NORMAL, &[5u8; 1000]);
    b.send(NodeId(1), Priority::NORMAL, small).unwrap();
    let mut seen = vec![
        recv(&mut a_rx).await.frame.header.msg_type,
        recv(&mut a_rx).await.frame.header.msg_type,
    ];
    seen.sort();
    assert_eq!(seen, ["reply", "small"]);
    assert_eq!(b.stats().shared_memory_messages, 1);
    // Slots are reused: a's two big frames were read one after the other, so one slot
    // each way may suffice, never more than the slot bound.
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(
        (2..=2 * petrel_net::shm::MAX_SLOTS).contains(&files),
        "{files}"
    );
    // Closed transports delete their slot files.
    drop((a, a_rx, b, b_rx));
    let closed = std::time::Instant::now();
    while std::fs::read_dir(dir.path()).unwrap().count() > 0 {
        assert!(
            closed.elapsed() < Duration::from_secs(30),
            "slot files left behind"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With a shaper the emulated link must carry the bytes: shared memory is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shaped_link_never_uses_shared_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = NetConfig {
        shared_memory_dir: Some(dir.path().to_path_buf()),
        shared_memory_min_bytes: 1024,
        shaper: Some(petrel_net::ShaperConfig::mbit(1000.0)),
        ..NetConfig::default()
    };
    let ((a, _a_rx), (_b, mut b_rx)) = pair(cfg);
    let big = frame(1, 2, "big", Priority::NORMAL, &vec![1u8; 256 << 10]);
    a.send(NodeId(2), Priority::NORMAL, big).unwrap();
    assert_eq!(recv(&mut b_rx).await.frame.header.msg_type, "big");
    assert_eq!(a.stats().shared_memory_messages, 0);
}

/// A `shared_memory_dir` that does not exist is refused when the transport starts, naming it.
#[tokio::test]
async fn a_missing_shared_memory_dir_is_refused_at_start() {
    let creds = ClusterCredentials::generate_cluster(&["a"]).unwrap();
    let cfg = NetConfig {
        shared_memory_dir: Some("/nonexistent/petrel-shm".into()),
        ..NetConfig::default()
    };
    let err = Net::quic(NodeId(1), localhost(), &creds[0], cfg)
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("shared_memory_dir = /nonexistent/petrel-shm"),
        "{err}"
    );
}
