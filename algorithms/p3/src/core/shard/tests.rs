use super::*;
use crate::core::mode::Mode;
use crate::core::worker::SliceWorkerCore;

/// Every worker's whole gradient, `grad(worker, index)` per parameter of each layer.
pub(crate) fn worker_grads(
    counts: &[u64],
    workers: &[usize],
    grad: impl Fn(usize, usize) -> f32,
) -> Vec<Vec<Vec<f32>>> {
    let layer = |w, c: u64| (0..c as usize).map(|i| grad(w, i)).collect();
    workers
        .iter()
        .map(|&w| counts.iter().map(|&c| layer(w, c)).collect())
        .collect()
}

fn opt() -> FlatSgdMomentum {
    FlatSgdMomentum::new(0.1, 0.9)
}

#[test]
fn shard_averages_in_worker_order_and_steps() {
    let plan = SlicePlan::new(&[5], 3, 1).unwrap();
    let mut core = SliceShardCore::new(&plan, 0, 2, opt()).unwrap();
    assert_eq!(core.n_slices(), 2);
    core.init_slice(0, vec![1.0; 3]).unwrap();
    core.init_slice(1, vec![2.0; 2]).unwrap();
    // Worker 1 first: arrival order must not matter.
    assert_eq!(core.contribute(0, 1, 0, vec![3.0; 3]).unwrap(), None);
    let out = core.contribute(0, 0, 0, vec![1.0; 3]).unwrap().unwrap();
    // mean 2, v = 2, p = 1 - 0.1*2
    assert!(out.iter().all(|&x| (x - 0.8).abs() < 1e-6));
    assert_eq!(core.iteration(0), Some(1));
    assert_eq!(core.iteration(1), Some(0));
    // Momentum carries over to the next iteration: v = 0.9*2 + 0 = 1.8.
    core.contribute(1, 0, 0, vec![0.0; 3]).unwrap();
    let out = core.contribute(1, 1, 0, vec![0.0; 3]).unwrap().unwrap();
    assert!(out.iter().all(|&x| (x - (0.8 - 0.18)).abs() < 1e-6));
}

#[test]
fn a_restored_shard_continues_exactly_as_the_original() {
    let plan = SlicePlan::new(&[5], 3, 1).unwrap();
    let mut a = SliceShardCore::new(&plan, 0, 2, opt()).unwrap();
    a.init_slice(0, vec![1.0; 3]).unwrap();
    a.init_slice(1, vec![2.0; 2]).unwrap();
    for (slice, n) in [(0, 3), (1, 2)] {
        a.contribute(0, 0, slice, vec![0.5; n]).unwrap();
        a.contribute(0, 1, slice, vec![1.5; n]).unwrap();
    }
    assert!(matches!(
        a.snapshot(0),
        Err(P3CoreError::WrongIteration { .. })
    ));
    let snap = a.snapshot(1).unwrap();
    // A gradient of round 1 already in is not part of the checkpoint.
    a.contribute(1, 1, 0, vec![1.0; 3]).unwrap();
    let mut b = SliceShardCore::new(&plan, 0, 2, opt()).unwrap();
    b.restore(1, snap.clone()).unwrap();
    b.contribute(1, 1, 0, vec![1.0; 3]).unwrap();
    let from_a = a.contribute(1, 0, 0, vec![0.25; 3]).unwrap();
    let from_b = b.contribute(1, 0, 0, vec![0.25; 3]).unwrap();
    assert_eq!(from_a, from_b);
    assert!(from_a.is_some());
    assert!(matches!(
        b.restore(1, snap[..1].to_vec()),
        Err(P3CoreError::SliceCount { .. })
    ));
}

#[test]
fn shard_rejects_bad_input() {
    let plan = SlicePlan::new(&[4], 2, 2).unwrap();
    let mut core = SliceShardCore::new(&plan, 1, 2, opt()).unwrap();
    assert!(matches!(
        core.contribute(0, 0, 1, vec![0.0; 2]),
        Err(P3CoreError::NotInitialised { slice: 1 })
    ));
    assert!(matches!(
        core.init_slice(0, vec![0.0; 2]),
        Err(P3CoreError::NotOwned { .. })
    ));
    core.init_slice(1, vec![0.0; 2]).unwrap();
    assert!(matches!(
        core.contribute(0, 0, 1, vec![0.0; 3]),
        Err(P3CoreError::Length { .. })
    ));
    assert!(matches!(
        core.contribute(1, 0, 1, vec![0.0; 2]),
        Err(P3CoreError::WrongIteration { .. })
    ));
    assert!(matches!(
        core.contribute(0, 2, 1, vec![0.0; 2]),
        Err(P3CoreError::WorkerOutOfRange { .. })
    ));
    core.contribute(0, 0, 1, vec![0.0; 2]).unwrap();
    assert!(matches!(
        core.contribute(0, 0, 1, vec![0.0; 2]),
        Err(P3CoreError::Duplicate { .. })
    ));
}

#[test]
fn shards_reproduce_reference_for_every_mode() {
    let counts = [7u64, 3, 10];
    let init: Vec<Vec<f32>> = counts
        .iter()
        .map(|&c| (0..c).map(|i| i as f32 * 0.1).collect())
        .collect();
    let grads = |w: usize, it: usize| -> Vec<Vec<f32>> {
        counts
            .iter()
            .map(|&c| {
                (0..c)
                    .map(|i| ((w + 1) * (it + 2)) as f32 * 0.013 + i as f32 * 0.007)
                    .collect()
            })
            .collect()
    };
    let mut ref_p = init.clone();
    let mut ref_v: Vec<Vec<f32>> = counts.iter().map(|&c| vec![0.0; c as usize]).collect();
    for it in 0..3 {
        reference_step(
            &opt(),
            &mut ref_p,
            &mut ref_v,
            &[grads(0, it), grads(1, it)],
        )
        .unwrap();
    }
    for mode in [Mode::Sequential, Mode::Fifo, Mode::P3] {
        let plan = SlicePlan::layerwise_split(mode, &counts, 4, 2).unwrap();
        let mut shards: Vec<SliceShardCore> = (0..2)
            .map(|s| SliceShardCore::new(&plan, s, 2, opt()).unwrap())
            .collect();
        let mut workers: Vec<SliceWorkerCore> = (0..2)
            .map(|_| SliceWorkerCore::new(plan.clone(), init.clone()).unwrap())
            .collect();
        for s in plan.slices() {
            let a = s.offset as usize;
            shards[s.shard]
                .init_slice(s.id, init[s.layer][a..a + s.len as usize].to_vec())
                .unwrap();
        }
        for it in 0..3 {
            workers.iter_mut().for_each(|w| w.begin_round(it as u64));
            // Last layer first, as backprop produces them; workers interleaved.
            for layer in (0..counts.len()).rev() {
                for w in [1, 0] {
                    let g = grads(w, it);
                    for (s, vals) in workers[w].grad_slices(layer, &g[layer]).unwrap() {
                        if let Some(out) = shards[s.shard]
                            .contribute(it as u64, w, s.id, vals)
                            .unwrap()
                        {
                            for wk in workers.iter_mut() {
                                wk.receive(it as u64, s.id, &out).unwrap();
                            }
                        }
                    }
                }
            }
            assert!(workers.iter().all(|w| w.all_ready()));
        }
        for w in &workers {
            assert_eq!(w.params(), ref_p.as_slice(), "mode {mode:?}");
        }
    }
}

/// Shard 2 joins after iteration 1 (with worker 2) and shard 1 leaves after iteration 3,
/// told by the pushes: every slice changes owner at the same boundary, a moved slice's
/// values and momentum reach its new owner, the joiner's pulls (some held at a new owner
/// until the slice arrives) all start it at iteration 2, the leaver ends with nothing, and
/// the parameters are the reference's bit for bit.
#[test]
fn shards_join_and_leave_at_boundaries_and_match_the_reference() {
    use crate::core::slicing::owner;
    let counts = [5u64, 3];
    let plan = SlicePlan::new(&counts, 2, 2).unwrap();
    let (end, n) = (6u64, plan.slices().len());
    let mut cores: Vec<SliceShardCore> = (0..3)
        .map(|s| {
            SliceShardCore::elastic(&plan, s, 3, &[0, 1], opt())
                .unwrap()
                .ending_at(end)
        })
        .collect();
    assert_eq!(cores[2].n_slices(), 0);
    let init: Vec<Vec<f32>> = counts.iter().map(|&c| vec![0.5; c as usize]).collect();
    for s in plan.slices() {
        let a = s.offset as usize;
        let v = init[s.layer][a..a + s.len as usize].to_vec();
        cores[s.shard].init_slice(s.id, v).unwrap();
    }
    let grad =
        |w: usize, it: u64, i: usize| (w as f32 + 1.0) * 0.01 + it as f32 * 0.003 + i as f32 * 1e-4;
    let (mut ref_p, mut ref_v) = (init.clone(), vec![vec![0.0; 5], vec![0.0; 3]]);
    let (mut shards, mut workers) = (vec![0usize, 1], vec![0usize, 1]);
    let mut seen_shards = Vec::new();
    let mut joiner = Vec::new();
    let mut after_1 = Vec::new();
    for it in 0..end {
        let mut next = None;
        for &w in workers.iter().rev() {
            let announce = Announce {
                joiners: if it == 1 && w == 1 { vec![2] } else { vec![] },
                shards_joining: if it == 1 && w == 0 { vec![2] } else { vec![] },
                shards_leaving: if it == 3 && w == 1 { vec![1] } else { vec![] },
                ..Announce::default()
            };
            for s in plan.slices() {
                let a = s.offset as usize;
                let g = (a..a + s.len as usize).map(|i| grad(w, it, i)).collect();
                let at = owner(s.id, &shards);
                let Some(out) = cores[at].push(it, w, s.id, g, &announce).unwrap() else {
                    continue;
                };
                assert_eq!(*next.get_or_insert(out.shards.clone()), out.shards);
                assert_eq!(
                    out.answered, workers,
                    "the replies of {it} go to its workers"
                );
                let from = Pulled::from(&out);
                joiner.extend(out.pulls.iter().map(|_| (s.id, from.clone())));
                if let Some(h) = out.handoff {
                    assert_eq!(h.to, owner(s.id, &out.shards));
                    let to = h.to;
                    joiner.extend(
                        cores[to]
                            .receive(h)
                            .unwrap()
                            .into_iter()
                            .map(|(_, p)| (s.id, p)),
                    );
                }
                if it == 1 && s.id == 0 {
                    // The joiner, a member of iteration 2 now, pulls every other slice
                    // from its owner at 2: some have not completed 1 (held), some moved.
                    for o in &plan.slices()[1..] {
                        let at2 = owner(o.id, &out.shards);
                        if let Some(p) = cores[at2].pull(2, o.id).unwrap() {
                            joiner.push((o.id, p));
                        }
                    }
                }
            }
        }
        if it == 0 {
            assert_eq!(cores[0].pull(2, 0).unwrap(), None);
        }
        let wg = worker_grads(&counts, &workers, |w, i| grad(w, it, i));
        reference_step(&opt(), &mut ref_p, &mut ref_v, &wg).unwrap();
        if it == 1 {
            after_1 = ref_p.clone();
            workers = vec![0, 1, 2];
        }
        shards = next.unwrap();
        seen_shards.push(shards.clone());
    }
    assert_eq!(
        seen_shards,
        [
            vec![0, 1],
            vec![0, 1, 2],
            vec![0, 1, 2],
            vec![0, 2],
            vec![0, 2],
            vec![0, 2]
        ]
    );
    assert_eq!(joiner.len(), n, "{joiner:?}");
    for (id, p) in &joiner {
        let s = plan.slice(*id).unwrap();
        let a = s.offset as usize;
        assert_eq!((p.start, &p.shards), (2, &vec![0, 1, 2]));
        assert_eq!(p.values, after_1[s.layer][a..a + s.len as usize]);
    }
    assert_eq!(cores[1].n_slices(), 0, "the leaver handed everything over");
    assert!(cores[0].finished() && cores[2].finished() && !cores[1].finished());
    for s in plan.slices() {
        let a = s.offset as usize;
        let at = owner(s.id, &shards);
        let want = &ref_p[s.layer][a..a + s.len as usize];
        assert_eq!(cores[at].params(s.id).unwrap(), want, "slice {}", s.id);
    }
    // A slice handed away is no longer pulled here.
    let moved = plan.slices().iter().find(|s| s.shard == 1).unwrap();
    assert!(cores[1].pull(0, moved.id).is_err());
}
