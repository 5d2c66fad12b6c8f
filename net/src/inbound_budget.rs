//! Who may hold how much of a node's receive memory, which lane a frame is read in, and
//! when a peer whose frames do not progress is cut off.
//!
//! Invariant: no single peer, and no data stream, can stop this node from reading control
//! traffic (heartbeats, joins, barriers, failure notices) from anyone else.
//!
//! - **Per-peer shares, both lanes.** Each peer (the name its certificate binds, over all
//!   its connections) has a data share ([`peer_share`]: half of `inbound_buffer_bytes`, at
//!   least one largest message) and a control reserve ([`PEER_CONTROL_RESERVE`]). Data
//!   frames take from their peer's share first, then the node's budget; control frames
//!   only from their peer's reserve, so a peer announcing frames it never sends pins only
//!   its own. Connections of one name come only from that node's address
//!   (`identity::check_origin`), so no one else can draw on its share.
//! - **The receiver picks the lane.** Control only when the lane header says control
//!   priority, the frame is at most [`CONTROL_FRAME_MAX`] bytes and its envelope (read
//!   before any budget, at most [`CONTROL_HEADER_MAX`] bytes) names one of
//!   [`CONTROL_KINDS`]; any other claim to control priority is charged to the data lane.
//! - **Frames must progress.** Frames holding budget must bring [`MIN_PROGRESS_BYTES_PER_S`]
//!   over each [`PROGRESS_WINDOW`] ([`ProgressWatch`]), or the peer is disconnected and
//!   named (`disconnected_names`). A connection where nothing arrives is a link down, left
//!   to QUIC's idle timeout and `frame_timeout_ms`, so a short cut costs no frame.
//! - A frame with no bytes for `frame_timeout_ms` has its stream reset and budget released,
//!   a strike against its peer; at [`STALL_STRIKES`] the connection is closed.
//!
//! The decisions are plain functions and structs here; the QUIC read path applies them.

use petrel_messages::envelope::FramePrefix;
use petrel_messages::runtime::{BarrierEnter, Heartbeat, Join, JoinStatus, PeerDown, Shutdown};
use petrel_messages::{Priority, RemoteMessage};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest frame that may use the control lane.
pub const CONTROL_FRAME_MAX: usize = 64 << 10;
/// Largest envelope header read to classify a frame claiming control priority.
pub const CONTROL_HEADER_MAX: usize = 1 << 10;
/// Bytes of one peer's control frames held at once: a few of the largest.
pub const PEER_CONTROL_RESERVE: usize = 4 * CONTROL_FRAME_MAX;
/// Stalled frames after which a peer's connection is closed.
pub const STALL_STRIKES: u32 = 3;
/// The window over which a connection's partly read frames must progress.
pub const PROGRESS_WINDOW: Duration = Duration::from_secs(2);
/// The least partly read frames must bring per second over [`PROGRESS_WINDOW`].
pub const MIN_PROGRESS_BYTES_PER_S: u64 = 4 << 10;
/// The message types of the runtime's control traffic (replies carry their request's type).
pub const CONTROL_KINDS: [&str; 6] = [
    Join::TYPE_NAME,
    JoinStatus::TYPE_NAME,
    Heartbeat::TYPE_NAME,
    PeerDown::TYPE_NAME,
    Shutdown::TYPE_NAME,
    BarrierEnter::TYPE_NAME,
];

/// Which budget a frame is read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The runtime's control traffic: its peer's control reserve.
    Control,
    /// Everything else: the peer's share, then the node's budget.
    Data,
}

/// Whether a frame may be control by priority and size (its envelope is then read first).
pub fn may_be_control(priority: Priority, prefix: &FramePrefix) -> bool {
    priority >= Priority::CONTROL
        && prefix.total_len() <= CONTROL_FRAME_MAX
        && prefix.header_len <= CONTROL_HEADER_MAX
}

/// Whether `msg_type` is one of the runtime's control kinds.
pub fn is_control_kind(msg_type: &str) -> bool {
    CONTROL_KINDS.contains(&msg_type)
}

/// The lane of a frame of `total_len` bytes at `priority` whose envelope names `msg_type`
/// (`None`: not read).
pub fn lane_of(priority: Priority, total_len: usize, msg_type: Option<&str>) -> Lane {
    match msg_type {
        Some(kind)
            if priority >= Priority::CONTROL
                && total_len <= CONTROL_FRAME_MAX
                && is_control_kind(kind) =>
        {
            Lane::Control
        }
        _ => Lane::Data,
    }
}

/// The share of one peer, given the node's budget and largest message.
pub fn peer_share(node_budget: usize, max_message: usize) -> usize {
    (node_budget / 2)
        .max(max_message)
        .min(Semaphore::MAX_PERMITS)
}

/// The node-wide budgets of the receive path.
#[derive(Clone)]
pub struct InboundBudgets {
    node: Arc<Semaphore>,
    peer_share: usize,
}

impl InboundBudgets {
    /// Budgets for a node holding at most `node_budget` bytes of data frames.
    pub fn new(node_budget: usize, max_message: usize) -> Self {
        let node_budget = node_budget.max(max_message).min(Semaphore::MAX_PERMITS);
        Self {
            node: Arc::new(Semaphore::new(node_budget)),
            peer_share: peer_share(node_budget, max_message),
        }
    }

    /// The budgets of a new peer.
    pub fn peer(&self) -> PeerBudget {
        PeerBudget {
            share: Arc::new(Semaphore::new(self.peer_share)),
            control: Arc::new(Semaphore::new(PEER_CONTROL_RESERVE)),
            stalls: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Waits until `len` bytes of `lane` fit; `None` once the budgets are closed.
    pub async fn acquire(
        &self,
        peer: &PeerBudget,
        lane: Lane,
        len: u32,
    ) -> Option<[Option<OwnedSemaphorePermit>; 2]> {
        match lane {
            Lane::Control => {
                // Only this peer's reserve: a control-lane flood queues behind itself.
                let p = peer.control.clone().acquire_many_owned(len).await.ok()?;
                Some([Some(p), None])
            }
            Lane::Data => {
                // The peer's share first: a hoarding peer queues behind itself only.
                let mine = peer.share.clone().acquire_many_owned(len).await.ok()?;
                let node = self.node.clone().acquire_many_owned(len).await.ok()?;
                Some([Some(mine), Some(node)])
            }
        }
    }
}

/// One connection's budgets (its peer's data share and control reserve) and stall strikes.
#[derive(Clone)]
pub struct PeerBudget {
    share: Arc<Semaphore>,
    control: Arc<Semaphore>,
    stalls: Arc<AtomicU32>,
}

impl PeerBudget {
    /// The same peer's budgets for another connection, with its own stall strikes.
    pub fn another_connection(&self) -> PeerBudget {
        PeerBudget {
            share: self.share.clone(),
            control: self.control.clone(),
            stalls: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Records a stalled frame; true when the peer reached [`STALL_STRIKES`] (disconnect).
    pub fn strike(&self) -> bool {
        self.stalls.fetch_add(1, Ordering::Relaxed) + 1 == STALL_STRIKES
    }
}

/// One look at a connection, taken every few hundred milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct ProgressSample {
    /// When it was taken.
    pub now: Instant,
    /// Frames holding budget whose bytes have not all arrived.
    pub partial_frames: usize,
    /// Bytes read into frames holding budget, since the connection opened.
    pub frame_bytes: u64,
    /// UDP datagrams received on the connection, since it opened.
    pub datagrams: u64,
}

/// What [`ProgressWatch::observe`] concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing held, progressing, or the link is silent.
    Fine,
    /// Frames held budget for `over` and brought only `bytes`: disconnect the peer.
    TooSlow {
        /// Bytes the partly read frames brought.
        bytes: u64,
        /// The window they were held over.
        over: Duration,
    },
}

/// Judges whether a connection's partly read frames progress: if it held partial frames
/// throughout the last window they must have brought `min_bytes_per_s`, unless nothing at
/// all arrived lately (a link cut, left to the timeouts).
#[derive(Debug)]
pub struct ProgressWatch {
    window: Duration,
    min_bytes_per_s: u64,
    /// (time, frame bytes) since frames were last held throughout, oldest (baseline) first.
    held: VecDeque<(Instant, u64)>,
    datagrams: u64,
    last_datagram: Instant,
}

impl ProgressWatch {
    /// A watch with [`PROGRESS_WINDOW`] and [`MIN_PROGRESS_BYTES_PER_S`], starting at `now`.
    pub fn new(now: Instant) -> Self {
        Self::with_rule(PROGRESS_WINDOW, MIN_PROGRESS_BYTES_PER_S, now)
    }

    /// A watch judging over `window` against `min_bytes_per_s`.
    pub fn with_rule(window: Duration, min_bytes_per_s: u64, now: Instant) -> Self {
        Self {
            window,
            min_bytes_per_s,
            held: VecDeque::new(),
            datagrams: 0,
            last_datagram: now,
        }
    }

    /// Takes one sample; says whether the peer must be disconnected.
    pub fn observe(&mut self, sample: ProgressSample) -> Progress {
        if sample.datagrams != self.datagrams {
            self.datagrams = sample.datagrams;
            self.last_datagram = sample.now;
        }
        if sample.partial_frames == 0 {
            self.held.clear();
            return Progress::Fine;
        }
        self.held.push_back((sample.now, sample.frame_bytes));
        while self
            .held
            .get(1)
            .is_some_and(|(at, _)| sample.now.saturating_duration_since(*at) >= self.window)
        {
            self.held.pop_front();
        }
        let Some(&(start, bytes_then)) = self.held.front() else {
            return Progress::Fine;
        };
        let over = sample.now.saturating_duration_since(start);
        if over < self.window {
            return Progress::Fine;
        }
        // A live peer's keep-alives and acks arrive every second: silence is a link down.
        let silent =
            sample.now.saturating_duration_since(self.last_datagram) > self.window.mul_f64(0.75);
        let bytes = sample.frame_bytes.saturating_sub(bytes_then);
        let needed = (self.min_bytes_per_s as f64 * over.as_secs_f64()) as u64;
        if silent || bytes >= needed {
            Progress::Fine
        } else {
            Progress::TooSlow { bytes, over }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEAT: Option<&str> = Some(Heartbeat::TYPE_NAME);

    #[test]
    fn only_small_control_kinds_at_control_priority_use_the_control_lane() {
        assert_eq!(lane_of(Priority::CONTROL, 200, BEAT), Lane::Control);
        assert_eq!(
            lane_of(
                Priority(Priority::CONTROL.0 + 1),
                200,
                Some("petrel.barrier")
            ),
            Lane::Control
        );
        for kind in CONTROL_KINDS {
            assert_eq!(lane_of(Priority::CONTROL, 200, Some(kind)), Lane::Control);
        }
        // Too large, too low, not read, or not a control kind: the data lane.
        assert_eq!(
            lane_of(Priority::CONTROL, CONTROL_FRAME_MAX + 1, BEAT),
            Lane::Data
        );
        assert_eq!(lane_of(Priority::HIGH, 200, BEAT), Lane::Data);
        assert_eq!(lane_of(Priority::CONTROL, 200, None), Lane::Data);
        assert_eq!(
            lane_of(Priority::CONTROL, 200, Some("app.grad")),
            Lane::Data
        );
        assert_eq!(lane_of(Priority::NORMAL, 60 << 20, None), Lane::Data);
    }

    #[test]
    fn only_a_small_frame_at_control_priority_has_its_envelope_read_first() {
        let prefix = |header_len, body_len| FramePrefix {
            header_len,
            body_len,
        };
        assert!(may_be_control(Priority::CONTROL, &prefix(60, 40)));
        assert!(!may_be_control(Priority::HIGH, &prefix(60, 40)));
        assert!(!may_be_control(
            Priority::CONTROL,
            &prefix(60, CONTROL_FRAME_MAX)
        ));
        assert!(!may_be_control(
            Priority::CONTROL,
            &prefix(CONTROL_HEADER_MAX + 1, 0)
        ));
    }

    #[test]
    fn a_peer_gets_half_the_node_budget_but_at_least_one_message() {
        assert_eq!(peer_share(256 << 20, 64 << 20), 128 << 20);
        assert_eq!(peer_share(64 << 20, 64 << 20), 64 << 20);
        assert_eq!(peer_share(1 << 20, 4 << 20), 4 << 20);
    }

    #[tokio::test]
    async fn a_hoarding_peer_cannot_take_the_whole_node_budget() {
        let budgets = InboundBudgets::new(256 << 20, 64 << 20);
        let hoarder = budgets.peer();
        let mut held = Vec::new();
        // Two 60 MiB frames fit the hoarder's 128 MiB share; a third waits on its share.
        for _ in 0..2 {
            held.push(
                budgets
                    .acquire(&hoarder, Lane::Data, 60 << 20)
                    .await
                    .unwrap(),
            );
        }
        let third = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budgets.acquire(&hoarder, Lane::Data, 60 << 20),
        )
        .await;
        assert!(third.is_err(), "the hoarder got more than its share");
        // Another peer still gets 100 MiB of data, and the hoarder's control frames pass.
        let other = budgets.peer();
        assert!(
            budgets
                .acquire(&other, Lane::Data, 100 << 20)
                .await
                .is_some()
        );
        assert!(
            budgets
                .acquire(&hoarder, Lane::Control, 300)
                .await
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_peer_filling_its_control_reserve_blocks_no_other_peer() {
        let budgets = InboundBudgets::new(256 << 20, 64 << 20);
        let flooder = budgets.peer();
        let mut held = Vec::new();
        for _ in 0..PEER_CONTROL_RESERVE / CONTROL_FRAME_MAX {
            let frame = CONTROL_FRAME_MAX as u32;
            held.push(budgets.acquire(&flooder, Lane::Control, frame).await);
        }
        let wait = std::time::Duration::from_millis(50);
        let second_connection = flooder.another_connection();
        let more = budgets.acquire(&second_connection, Lane::Control, 200);
        assert!(
            tokio::time::timeout(wait, more).await.is_err(),
            "a second connection of the flooder got beyond its reserve"
        );
        for _ in 0..100 {
            let other = budgets.peer();
            let beat = budgets.acquire(&other, Lane::Control, 200);
            assert!(tokio::time::timeout(wait, beat).await.is_ok());
        }
    }

    fn sample(
        at_ms: u64,
        partial: usize,
        bytes: u64,
        datagrams: u64,
        t0: Instant,
    ) -> ProgressSample {
        ProgressSample {
            now: t0 + Duration::from_millis(at_ms),
            partial_frames: partial,
            frame_bytes: bytes,
            datagrams,
        }
    }

    #[test]
    fn stalled_or_trickled_frames_on_a_live_connection_are_too_slow() {
        let t0 = Instant::now();
        // 128 frames, a byte each a second, keep-alives arriving: judged at the window.
        let mut watch = ProgressWatch::new(t0);
        let mut verdicts = Vec::new();
        for tick in 0..=12 {
            let ms = tick * 250;
            verdicts.push(watch.observe(sample(ms, 128, 128 * ms / 1000, tick, t0)));
        }
        assert!(
            verdicts[..8].iter().all(|v| *v == Progress::Fine),
            "{verdicts:?}"
        );
        assert_eq!(
            verdicts[8],
            Progress::TooSlow {
                bytes: 256,
                over: PROGRESS_WINDOW
            }
        );
        // Stalled: no byte at all.
        let mut watch = ProgressWatch::new(t0);
        assert_eq!(watch.observe(sample(0, 5, 1000, 1, t0)), Progress::Fine);
        assert!(matches!(
            watch.observe(sample(2000, 5, 1000, 9, t0)),
            Progress::TooSlow { bytes: 0, .. }
        ));
    }

    #[test]
    fn flowing_idle_or_cut_off_connections_are_fine() {
        let t0 = Instant::now();
        // Frames flowing at 1 MB/s.
        let mut watch = ProgressWatch::new(t0);
        for tick in 0..20 {
            let ms = tick * 250;
            let v = watch.observe(sample(ms, 3, ms * 1000, tick, t0));
            assert_eq!(v, Progress::Fine);
        }
        // Nothing held: nothing to judge, however long.
        let mut watch = ProgressWatch::new(t0);
        for tick in 0..20 {
            assert_eq!(
                watch.observe(sample(tick * 250, 0, 0, tick, t0)),
                Progress::Fine
            );
        }
        // A link cut: frames held, nothing at all arrives, not even acknowledgements.
        let mut watch = ProgressWatch::new(t0);
        assert_eq!(watch.observe(sample(0, 2, 500, 40, t0)), Progress::Fine);
        for tick in 1..40 {
            assert_eq!(
                watch.observe(sample(tick * 250, 2, 500, 40, t0)),
                Progress::Fine
            );
        }
        // A frame held briefly between idle spells restarts the window each time.
        let mut watch = ProgressWatch::new(t0);
        for tick in 0..40u64 {
            let partial = usize::from(tick % 4 == 0);
            assert_eq!(
                watch.observe(sample(tick * 250, partial, 0, tick, t0)),
                Progress::Fine
            );
        }
    }

    #[test]
    fn the_third_stall_disconnects_once() {
        let peer = InboundBudgets::new(1 << 20, 1 << 10).peer();
        assert!(!peer.strike());
        assert!(!peer.strike());
        assert!(peer.strike());
        assert!(!peer.strike());
    }
}
