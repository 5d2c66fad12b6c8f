use super::*;

fn frame(len: usize) -> Bytes {
    let header = EnvelopeHeader {
        from: NodeId(3),
        to: NodeId(5),
        actor: "a".into(),
        msg_type: "t".into(),
        priority: Priority::default(),
        kind: EnvelopeKind::Tell,
    };
    let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    Frame::encode_raw(&header, &body).unwrap()
}

fn control(bytes: Bytes) -> Frame {
    Frame::decode(bytes, 1 << 20).unwrap()
}

const MAX: usize = 64 << 20;

#[test]
fn a_frame_goes_through_a_slot_that_is_reused_once_read() {
    let dir = tempfile::tempdir().unwrap();
    let tx = ShmSender::new(dir.path().into(), NodeId(3), 7, 1000, MAX);
    let mut rx = ShmReceiver::new(Some(dir.path().into()), NodeId(5));
    assert!(
        tx.try_send(NodeId(5), Priority::default(), &frame(10))
            .is_none()
    );
    let original = frame(100_000);
    let c = control(
        tx.try_send(NodeId(5), Priority::default(), &original)
            .unwrap(),
    );
    assert_eq!(c.header.msg_type, SHM_MSG_TYPE);
    let got = rx.receive(&c, MAX).unwrap();
    assert_eq!(got.header.from, NodeId(3));
    assert_eq!(got.body, Frame::decode(original.clone(), MAX).unwrap().body);
    // While the frame is held, its slot is busy: the next frame takes a second slot.
    let c2 = control(
        tx.try_send(NodeId(5), Priority::default(), &original)
            .unwrap(),
    );
    assert_eq!(ShmRef::parse(&c2.body.to_bytes(), MAX).unwrap().slot, 1);
    drop(got);
    drop(rx.receive(&c2, MAX).unwrap());
    // Both read and dropped: slot 0 is reused, no third file.
    let c3 = control(
        tx.try_send(NodeId(5), Priority::default(), &original)
            .unwrap(),
    );
    assert_eq!(ShmRef::parse(&c3.body.to_bytes(), MAX).unwrap().slot, 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    // A replayed control frame finds its slot free again once read.
    drop(rx.receive(&c3, MAX).unwrap());
    assert!(matches!(
        rx.receive(&c3, MAX),
        Err(NetError::ShmSlot { .. })
    ));
    // Shutdown deletes the sender's files.
    tx.clean_up();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Copies run outside the sender's lock: four threads sending to two peers at once
/// (two per peer) each get a slot of their own, every frame arrives intact, and a slot
/// being written is never handed to another send.
#[test]
fn four_threads_sending_to_two_peers_each_get_their_own_slots() {
    let dir = tempfile::tempdir().unwrap();
    let tx = Arc::new(ShmSender::new(dir.path().into(), NodeId(3), 1, 1, MAX));
    let original = frame(2 << 20);
    let sent: Vec<Vec<(NodeId, Frame)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = [NodeId(5), NodeId(5), NodeId(6), NodeId(6)]
            .into_iter()
            .map(|to| {
                let (tx, original) = (tx.clone(), original.clone());
                scope.spawn(move || {
                    (0..4)
                        .map(|_| {
                            let c = tx.try_send(to, Priority::default(), &original).unwrap();
                            (to, control(c))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want = Frame::decode(original.clone(), MAX).unwrap().body;
    for (to, controls) in sent.iter().flatten().fold(
        std::collections::BTreeMap::<u32, Vec<&Frame>>::new(),
        |mut by_peer, (to, c)| {
            by_peer.entry(to.0).or_default().push(c);
            by_peer
        },
    ) {
        let slots: std::collections::BTreeSet<u64> = controls
            .iter()
            .map(|c| ShmRef::parse(&c.body.to_bytes(), MAX).unwrap().slot)
            .collect();
        assert_eq!(slots.len(), 8, "peer {to}: eight frames held, eight slots");
        let mut rx = ShmReceiver::new(Some(dir.path().into()), NodeId(to));
        for c in controls {
            assert_eq!(rx.receive(c, MAX).unwrap().body, want);
        }
    }
}

#[test]
fn a_slot_grows_and_the_receiver_maps_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let tx = ShmSender::new(dir.path().into(), NodeId(3), 1, 1, MAX);
    let mut rx = ShmReceiver::new(Some(dir.path().into()), NodeId(5));
    let small = frame(1000);
    // Every slot made and held, then slot 0 read: the big frame has to grow slot 0.
    let mut held: Vec<Frame> = (0..MAX_SLOTS)
        .map(|_| {
            let c = control(tx.try_send(NodeId(5), Priority::default(), &small).unwrap());
            rx.receive(&c, MAX).unwrap()
        })
        .collect();
    drop(held.remove(0));
    let big = frame(3 << 20);
    let c = control(tx.try_send(NodeId(5), Priority::default(), &big).unwrap());
    let r = ShmRef::parse(&c.body.to_bytes(), MAX).unwrap();
    assert_eq!((r.slot, r.file_len), (0, (SLOT_HEADER + (4 << 20)) as u64));
    let got = rx.receive(&c, MAX).unwrap();
    assert_eq!(got.body, Frame::decode(big.clone(), MAX).unwrap().body);
    // Every slot busy: QUIC.
    assert!(
        tx.try_send(NodeId(5), Priority::default(), &small)
            .is_none()
    );
    drop(held);
    assert!(
        tx.try_send(NodeId(5), Priority::default(), &small)
            .is_some()
    );
}

#[test]
fn bad_control_frames_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tx = ShmSender::new(dir.path().into(), NodeId(3), 1, 1, MAX);
    let c = control(
        tx.try_send(NodeId(5), Priority::default(), &frame(5000))
            .unwrap(),
    );
    assert!(matches!(
        ShmReceiver::new(None, NodeId(5)).receive(&c, MAX),
        Err(NetError::ShmNotEnabled)
    ));
    // Over the bound: refused before any file is opened.
    let mut rx = ShmReceiver::new(Some(dir.path().into()), NodeId(5));
    assert!(matches!(
        rx.receive(&c, 100),
        Err(NetError::ShmOutOfBounds(_))
    ));
    // A control frame that names another node's slot (this node is 6) finds no file.
    let mut other = ShmReceiver::new(Some(dir.path().into()), NodeId(6));
    let err = other.receive(&c, MAX).unwrap_err();
    assert!(err.to_string().contains("petrel-shm-3-6-"), "{err}");
    // Bodies that break the bounds.
    let r = ShmRef {
        epoch: 1,
        slot: MAX_SLOTS as u64,
        len: 10,
        file_len: 100,
    };
    assert!(ShmRef::parse(&r.encode(), MAX).is_err());
    let r = ShmRef {
        slot: 0,
        file_len: 20,
        ..r
    };
    assert!(ShmRef::parse(&r.encode(), MAX).is_err());
    assert!(ShmRef::parse(&[0u8; 7], MAX).is_err());
    // The real one still reads.
    assert!(rx.receive(&c, MAX).is_ok());
}

#[test]
fn slot_choice_reuses_creates_grows_or_gives_up() {
    let mib = 1 << 20;
    assert_eq!(choose_slot(&[], 10, 8 * mib), SlotChoice::Create(mib));
    assert_eq!(
        choose_slot(&[(mib, false), (mib, true)], 10, 8 * mib),
        SlotChoice::Reuse(1)
    );
    assert_eq!(
        choose_slot(&[(mib, true)], 3 * mib, 8 * mib),
        SlotChoice::Create(4 * mib)
    );
    // Over the budget with a new slot: grow the free one instead.
    assert_eq!(
        choose_slot(&[(mib, true)], 3 * mib, 4 * mib + mib / 2),
        SlotChoice::Grow(0, 4 * mib)
    );
    // Nothing free and no room: QUIC.
    assert_eq!(
        choose_slot(&[(4 * mib, false)], mib, 4 * mib),
        SlotChoice::None
    );
    let full = vec![(mib, false); MAX_SLOTS];
    assert_eq!(choose_slot(&full, 10, usize::MAX), SlotChoice::None);
}

#[test]
fn file_names_hold_numbers_only() {
    let name = slot_file_name(NodeId(1), NodeId(2), u64::MAX, 7);
    assert_eq!(name, "petrel-shm-1-2-ffffffffffffffff-7");
}

#[test]
fn only_a_dead_senders_slots_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let live = ShmSender::new(dir.path().into(), NodeId(3), 7, 1000, MAX);
    let dead = ShmSender::new(dir.path().into(), NodeId(4), 8, 1000, MAX);
    assert!(
        live.try_send(NodeId(5), Priority::default(), &frame(5000))
            .is_some()
    );
    assert!(
        dead.try_send(NodeId(5), Priority::default(), &frame(5000))
            .is_some()
    );
    // A killed sender: its files stay, its lock goes with its descriptors.
    let orphan = dead.peers.lock().unwrap()[&NodeId(5)][0].path.clone();
    dead.peers.lock().unwrap().clear();
    std::mem::forget(dead);
    std::fs::write(dir.path().join("unrelated"), b"x").unwrap();
    assert_eq!(remove_stale_slots(dir.path()), vec![orphan.clone()]);
    assert!(!orphan.exists());
    assert!(dir.path().join("unrelated").exists());
    let kept = live.peers.lock().unwrap()[&NodeId(5)][0].path.clone();
    assert!(kept.exists());
}
