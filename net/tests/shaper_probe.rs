//! The shaper limits a real QUIC transfer to the configured rate, and added latency does not
//! collapse throughput (a regression: GRO batches were once truncated in the delay line).

use bytes::Bytes;
use petrel_messages::{EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use petrel_net::{ClusterCredentials, Net, NetConfig, PeerAddr, ShaperConfig};
use std::time::{Duration, Instant};

fn frame(n: usize) -> Bytes {
    let header = EnvelopeHeader {
        from: NodeId(1),
        to: NodeId(2),
        actor: "s".into(),
        msg_type: "t".into(),
        priority: Priority::HIGH,
        kind: EnvelopeKind::Tell,
    };
    Frame::encode(&header, serde_bytes::Bytes::new(&vec![0u8; n])).unwrap()
}

async fn transfer_time(shaper: ShaperConfig, size: usize) -> Duration {
    let cfg = NetConfig {
        shaper: Some(shaper),
        ..NetConfig::default()
    };
    let creds = ClusterCredentials::generate_cluster(&["a", "b"]).unwrap();
    let (a, _ra) = Net::quic(
        NodeId(1),
        "127.0.0.1:0".parse().unwrap(),
        &creds[0],
        cfg.clone(),
    )
    .unwrap();
    let (b, mut rb) = Net::quic(NodeId(2), "127.0.0.1:0".parse().unwrap(), &creds[1], cfg).unwrap();
    a.add_peer(NodeId(2), "b", PeerAddr::Quic(b.local_addr().unwrap()));
    b.add_peer(NodeId(1), "a", PeerAddr::Quic(a.local_addr().unwrap()));
    // Connect first, so the measurement is the transfer alone.
    a.send(NodeId(2), Priority::HIGH, frame(10)).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rb.recv())
        .await
        .unwrap()
        .unwrap();
    let t = Instant::now();
    a.send(NodeId(2), Priority::HIGH, frame(size)).unwrap();
    tokio::time::timeout(Duration::from_secs(30), rb.recv())
        .await
        .unwrap()
        .unwrap();
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaper_enforces_rate_and_latency() {
    // 2 MiB at 40 Mbit/s: 0.42 s on the wire, whichever side is shaped.
    let egress = ShaperConfig {
        ingress_bytes_per_s: 0,
        ..ShaperConfig::mbit(40.0)
    };
    let ingress = ShaperConfig {
        egress_bytes_per_s: 0,
        ..ShaperConfig::mbit(40.0)
    };
    for (side, shaper) in [("egress", egress), ("ingress", ingress)] {
        let t = transfer_time(shaper, 2 << 20).await;
        assert!(
            t > Duration::from_millis(330),
            "{side} limit not enforced: {t:?}"
        );
        assert!(
            t < Duration::from_secs(4),
            "{side} shaping collapsed throughput: {t:?}"
        );
    }
    let latency = ShaperConfig {
        latency_ms: 20,
        ..ShaperConfig::default()
    };
    let t = transfer_time(latency, 1 << 20).await;
    assert!(t > Duration::from_millis(20), "latency not added: {t:?}");
    assert!(
        t < Duration::from_secs(3),
        "latency collapsed throughput: {t:?}"
    );
}
