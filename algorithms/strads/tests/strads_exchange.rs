//! STRADS exchange routing on real nodes: three workers send their round's share to each
//! other while the scheduler on a fourth node sees only the small partials, and every
//! worker answers with every worker's share in worker order, as the serial driver does. A
//! round in which one worker does not share fails at the scheduler with the worker's name
//! instead of hanging, and the serial driver refuses it outright. A share that another node
//! forges in a worker's name poisons the receiver, and the scheduler learns why.

use petrel_actors::{Cluster, NodeContext, Topology};
use petrel_messages::Priority;
use petrel_strads::StradsModelError;
use petrel_strads::kit::serial::{SerialOptions, SerialRunError, run_exchange};
use petrel_strads::shells::{
    ExchangeApp, ExchangePush, Plan, Pushed, Schedule, SchedulerOptions, Share, Step, StradsApp,
    WorkerSet, run_scheduler, start_exchange_worker,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every worker shares `(its index, round, commits it applied, a large payload)`; its
/// answer lists what it received.
struct Gossip;

type Seen = Vec<(u32, u64, u64)>;

impl StradsApp for Gossip {
    const DISPATCH_NAME: &'static str = "test.exchange.dispatch";
    const COMMIT_NAME: &'static str = "test.exchange.commit";
    /// Who skips the exchange this round (`None`: nobody).
    type Task = Option<u32>;
    type Partial = Seen;
    type Commit = u64;
}

impl ExchangeApp for Gossip {
    const SHARE_NAME: &'static str = "test.exchange.share";
    type Share = (u32, u64, u64, Vec<f64>);
}

const PAYLOAD: usize = 100_000;

struct GossipWorker {
    index: u32,
    commits: u64,
    /// The payloads of the last completed round, kept for its commit (as a real app keeps
    /// the shares it combines).
    held: usize,
}

impl ExchangePush<Gossip> for GossipWorker {
    fn push(
        &mut self,
        round: u64,
        skip: &Option<u32>,
    ) -> Result<Pushed<Seen, (u32, u64, u64, Vec<f64>)>, StradsModelError> {
        // Stagger the workers: a later worker's own dispatch then often comes after the
        // others' shares.
        std::thread::sleep(Duration::from_millis(u64::from(self.index) * 3));
        if *skip == Some(self.index) {
            return Ok(Pushed::Done(Vec::new()));
        }
        let payload = vec![f64::from(self.index) + round as f64; PAYLOAD];
        Ok(Pushed::Share((self.index, round, self.commits, payload)))
    }

    fn complete(
        &mut self,
        round: u64,
        shares: Vec<(u32, u64, u64, Vec<f64>)>,
    ) -> Result<Seen, StradsModelError> {
        self.held = shares.len();
        shares
            .into_iter()
            .map(|(from, r, commits, payload)| {
                let expected = f64::from(from) + round as f64;
                if payload.len() != PAYLOAD || payload.iter().any(|v| *v != expected) {
                    return Err(StradsModelError::protocol(format!(
                        "worker {from}'s payload of round {round} arrived damaged"
                    )));
                }
                Ok((from, r, commits))
            })
            .collect()
    }

    fn commit(&mut self, round: u64, commit: &u64) -> Result<(), StradsModelError> {
        if *commit != round || self.held == 0 {
            return Err(StradsModelError::protocol(format!(
                "commit {commit} in round {round} with {} shares held",
                self.held
            )));
        }
        self.commits += 1;
        Ok(())
    }
}

/// Runs `rounds` rounds; in round `skip.0` worker `skip.1` does not share.
struct Rounds {
    rounds: u64,
    skip: Option<(u64, u32)>,
    seen: Arc<Mutex<Vec<Vec<Seen>>>>,
}

impl Schedule<Gossip> for Rounds {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<Option<u32>> {
        if in_flight > 0 {
            return Step::Wait;
        }
        if round >= self.rounds {
            return Step::Done;
        }
        let skip = self.skip.filter(|(r, _)| *r == round).map(|(_, w)| w);
        Step::Run(Plan::All(skip))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<Seen>,
        _elapsed: Duration,
    ) -> Result<u64, StradsModelError> {
        self.seen.lock().unwrap().push(partials);
        Ok(round)
    }
}

const P: usize = 3;
const ROUNDS: u64 = 6;

/// What every worker must have seen in every round: each worker's share of that round,
/// in worker order, sent after exactly `round` commits.
fn expected() -> Vec<Vec<Seen>> {
    (0..ROUNDS)
        .map(|r| {
            let all: Seen = (0..P as u32).map(|w| (w, r, r)).collect();
            vec![all; P]
        })
        .collect()
}

fn exchange_cluster(
    transport: petrel_actors::Transport,
    skip: Option<(u64, u32)>,
    spoof: bool,
    seen: Arc<Mutex<Vec<Vec<Seen>>>>,
    outcome: Arc<Mutex<Option<Result<u64, String>>>>,
) -> Cluster {
    let mut topo = Topology::builder("exchange")
        .transport(transport)
        .node("sched", &["x-scheduler"]);
    for w in 0..P {
        topo = topo.node(&format!("w{w}"), &["x-worker"]);
    }
    let settings = topo.build().unwrap();
    Cluster::new(settings)
        .role("x-worker", move |ctx: NodeContext| {
            Box::pin(async move {
                let workers = ctx.nodes_with_role("x-worker");
                let index = workers
                    .iter()
                    .position(|n| *n == ctx.spec.name)
                    .ok_or("not a worker")? as u32;
                let logic = GossipWorker {
                    index,
                    commits: 0,
                    held: 0,
                };
                start_exchange_worker::<Gossip, _>(&ctx.node, "x", index, &workers, logic)
                    .map_err(|e| e.to_string())?;
                ctx.barrier("x-ready").await.map_err(|e| e.to_string())
            })
        })
        .role("x-scheduler", move |ctx: NodeContext| {
            let (seen, outcome) = (seen.clone(), outcome.clone());
            Box::pin(async move {
                ctx.barrier("x-ready").await.map_err(|e| e.to_string())?;
                let workers = ctx.nodes_with_role("x-worker");
                let set = WorkerSet::<Gossip>::resolve(&ctx.node, &workers, "x")
                    .map_err(|e| e.to_string())?;
                if spoof {
                    // The scheduler's node poses as worker 1 towards worker 0.
                    let w0 = ctx
                        .node
                        .actor_at::<Share<Gossip>>(&workers[0], "x")
                        .map_err(|e| e.to_string())?;
                    let forged = Share::<Gossip> {
                        round: 0,
                        from: 1,
                        share: (1, 0, 0, vec![1.0; PAYLOAD]),
                    };
                    w0.tell(forged, Priority::NORMAL)
                        .map_err(|e| e.to_string())?;
                }
                let mut app = Rounds {
                    rounds: ROUNDS,
                    skip,
                    seen,
                };
                let opts = SchedulerOptions {
                    timeout: Duration::from_secs(3),
                    ..SchedulerOptions::default()
                };
                let result = run_scheduler(&mut app, &set, &opts)
                    .await
                    .map(|s| s.rounds)
                    .map_err(|e| e.to_string());
                *outcome.lock().unwrap() = Some(result);
                Ok::<(), String>(())
            })
        })
}

fn serial_workers() -> Vec<GossipWorker> {
    (0..P as u32)
        .map(|index| GossipWorker {
            index,
            commits: 0,
            held: 0,
        })
        .collect()
}

#[test]
fn three_workers_exchange_shares_over_quic_as_the_serial_driver_does() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let outcome = Arc::new(Mutex::new(None));
    exchange_cluster(
        petrel_actors::Transport::Quic,
        None,
        false,
        seen.clone(),
        outcome.clone(),
    )
    .run_in_process()
    .unwrap();
    assert_eq!(outcome.lock().unwrap().clone(), Some(Ok(ROUNDS)));
    assert_eq!(*seen.lock().unwrap(), expected());

    let serial_seen = Arc::new(Mutex::new(Vec::new()));
    let mut app = Rounds {
        rounds: ROUNDS,
        skip: None,
        seen: serial_seen.clone(),
    };
    let run = run_exchange(&mut app, &mut serial_workers(), &SerialOptions::default()).unwrap();
    assert_eq!(run.rounds, ROUNDS);
    assert_eq!(*serial_seen.lock().unwrap(), expected());
}

#[test]
fn a_worker_that_does_not_share_fails_the_round_by_name_instead_of_hanging() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let outcome = Arc::new(Mutex::new(None));
    let started = std::time::Instant::now();
    exchange_cluster(
        petrel_actors::Transport::Memory,
        Some((2, 1)),
        false,
        seen.clone(),
        outcome.clone(),
    )
    .run_in_process()
    .unwrap();
    let err = outcome.lock().unwrap().clone().unwrap().unwrap_err();
    // Workers 0 and 2 wait for worker 1's share of round 2, which never comes: their asks
    // time out and the scheduler names the round and the worker.
    assert!(err.contains("round 2: worker 0"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(seen.lock().unwrap().len(), 2, "rounds 0 and 1 committed");

    let mut app = Rounds {
        rounds: ROUNDS,
        skip: Some((2, 1)),
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let err = run_exchange(&mut app, &mut serial_workers(), &SerialOptions::default()).unwrap_err();
    assert!(
        matches!(&err, SerialRunError::Worker { round: 2, .. })
            && err.to_string().contains("2 workers shared and 1 did not"),
        "{err}"
    );
}

#[test]
fn a_share_forged_by_another_node_poisons_the_receiver_with_the_reason() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let outcome = Arc::new(Mutex::new(None));
    exchange_cluster(
        petrel_actors::Transport::Memory,
        None,
        true,
        seen.clone(),
        outcome.clone(),
    )
    .run_in_process()
    .unwrap();
    let err = outcome.lock().unwrap().clone().unwrap().unwrap_err();
    assert!(
        err.contains("round 0: worker 0") && err.contains("claims worker 1"),
        "{err}"
    );
    assert!(seen.lock().unwrap().is_empty(), "no round committed");
}
