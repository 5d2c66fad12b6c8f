//! The candle adapter: stage-wise gradients equal candle's whole-model backward, and a
//! 2-worker P3 cluster trains a candle CNN to the same parameters in all three modes and
//! to the parameters of a single-process candle run at the same global batch.

use std::sync::Arc;
use std::time::Duration;

use petrel_ml::dnn::FlatSgdMomentum;
use petrel_ml::dnn::cifar::synthetic_cifar;
use petrel_ml::dnn::data::{Dataset, gaussian_clusters};
use petrel_net::NetConfig;
use petrel_p3::P3Error;
use petrel_p3::models::nets;
use petrel_p3::models::staged::evaluate;
use petrel_p3::{CandleStageModel, Mode, P3Job, StageModel, StagedNet, run_cluster};

fn max_rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            let scale = y.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
            x.iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs() / scale)
                .fold(0.0f32, f32::max)
        })
        .fold(0.0f32, f32::max)
}

fn stagewise_grads(m: &mut CandleStageModel, iter: u64) -> Vec<Vec<f32>> {
    let n = m.stage_tensors().len();
    for s in 0..n {
        m.forward_stage(iter, s).unwrap();
    }
    let mut per_stage = vec![Vec::new(); n];
    for s in (0..n).rev() {
        per_stage[s] = m.backward_stage(s).unwrap().grads;
    }
    per_stage.into_iter().flatten().collect()
}

#[test]
fn stagewise_gradients_match_whole_model_backward() {
    let cifar = Arc::new(synthetic_cifar(16, 10, 0.2, 1).unwrap());
    let flat = Arc::new(gaussian_clusters(16, 12, 4, 0.5, 2).unwrap());
    let cases: Vec<(StagedNet, Arc<Dataset>)> = vec![
        (nets::mlp(&[12], &[12, 16, 8, 4]), flat),
        (nets::lenet(3, 32, 10), cifar.clone()),
        (nets::resnet18(4, 10), cifar.clone()),
        (nets::vgg11(4, 10), cifar),
    ];
    for (net, data) in cases {
        let (_, initial) = net.init(7).unwrap();
        let mut m = CandleStageModel::new(net.clone(), &initial, data, 4, 1, 2).unwrap();
        // Move off the initial point so that zero-initialised tensors get gradients too.
        let whole0 = m.whole_model_pass(0).unwrap().0;
        for (t, (p, g)) in initial.iter().zip(&whole0).enumerate() {
            let moved: Vec<f32> = p.iter().zip(g).map(|(p, g)| p - 0.1 * g).collect();
            m.set_tensor(t, &moved).unwrap();
        }
        let whole = m.whole_model_pass(1).unwrap().0;
        let staged = stagewise_grads(&mut m, 1);
        let diff = max_rel_diff(&staged, &whole);
        assert!(
            diff <= 1e-5,
            "{}: stage-wise vs whole-model {diff}",
            net.name()
        );
        assert!(
            whole.iter().flatten().any(|g| *g != 0.0),
            "{}: gradients must not vanish",
            net.name()
        );
        let stats = m.stats().unwrap();
        assert!(stats.loss.is_finite() && stats.loss > 0.0);
    }
}

#[test]
fn adapter_rejects_out_of_order_calls_and_bad_tensors() {
    let net = nets::lenet(3, 32, 10);
    let (specs, initial) = net.init(1).unwrap();
    assert_eq!(specs.len(), 5);
    assert_eq!(specs[0][1].shape, vec![6, 3, 5, 5]);
    // Seeded: the same seed gives the same values, another seed others.
    assert_eq!(net.init(1).unwrap().1, initial);
    assert_ne!(net.init(2).unwrap().1, initial);
    let data = Arc::new(synthetic_cifar(8, 10, 0.2, 1).unwrap());
    let mut m = CandleStageModel::new(net, &initial, data, 2, 0, 1).unwrap();
    assert!(m.backward_stage(4).is_err());
    assert!(m.forward_stage(0, 2).is_err());
    assert!(m.set_tensor(0, &[1.0]).is_err());
    assert!(m.set_tensor(99, &[1.0]).is_err());
    let sizes: Vec<u64> = m.stage_tensors().into_iter().flatten().collect();
    assert_eq!(sizes[0], 6);
    assert_eq!(sizes[1], 6 * 3 * 25);
}

const BATCH: usize = 4;
const ITERS: u64 = 4;

fn job(mode: Mode, initial: &[Vec<f32>], opt: FlatSgdMomentum) -> P3Job {
    P3Job {
        mode,
        slice_size: 500,
        n_workers: 2,
        n_shards: 2,
        iterations: ITERS,
        opt,
        initial: Arc::new(initial.to_vec()),
        net: NetConfig::default(),
        transport: petrel_actors::Transport::Quic,
        ask_timeout: Duration::from_secs(30),
        checkpoint: None,
    }
}

/// Tolerance of the data-parallel run against one process at the same global batch: the
/// Trains `net` in this process with candle alone (whole-model backward, no P3, no
/// network): `iterations` steps of SGD with momentum `opt` on batches of `global_batch`
/// consecutive rows (iteration `i` takes rows `[i * global_batch, ..)`, the rows that `n`
/// P3 workers with batch `global_batch / n` share in that iteration). Returns the final
/// parameters: the reference a data-parallel run must reproduce.
fn train_single_process(
    net: &StagedNet,
    initial: &[Vec<f32>],
    data: Arc<Dataset>,
    global_batch: usize,
    opt: FlatSgdMomentum,
    iterations: u64,
) -> Result<Vec<Vec<f32>>, P3Error> {
    let mut params = initial.to_vec();
    let mut velocity: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.len()]).collect();
    let mut model = CandleStageModel::new(net.clone(), initial, data, global_batch, 0, 1)?;
    for iter in 0..iterations {
        let grads = model.whole_model_pass(iter)?.0;
        for (t, ((v, p), g)) in velocity
            .iter_mut()
            .zip(params.iter_mut())
            .zip(&grads)
            .enumerate()
        {
            opt.step(v, p, g)?;
            model.set_tensor(t, p)?;
        }
    }
    Ok(params)
}

/// shards average two per-worker mean gradients where candle takes one mean over the
/// global batch, so the sums round differently (a few ulps per step).
const SINGLE_PROCESS_TOL: f32 = 1e-4;

#[test]
fn three_modes_and_one_process_train_the_same_candle_model() {
    let net = nets::lenet(3, 32, 10);
    let (_, initial) = net.init(3).unwrap();
    let data = Arc::new(synthetic_cifar(64, 10, 0.2, 5).unwrap());
    let opt = FlatSgdMomentum::new(0.05, 0.9);
    let single = train_single_process(&net, &initial, data.clone(), 2 * BATCH, opt, ITERS).unwrap();
    assert_ne!(single, initial, "training must move the parameters");
    let mut by_mode = Vec::new();
    for mode in [Mode::Sequential, Mode::Fifo, Mode::P3] {
        let (net2, data2, init2) = (net.clone(), data.clone(), initial.clone());
        let factory =
            move |w| CandleStageModel::new(net2.clone(), &init2, data2.clone(), BATCH, w, 2);
        let reports = run_cluster(&job(mode, &initial, opt), factory, None).unwrap();
        assert_eq!(reports.len(), 2);
        assert_eq!(
            reports[0].params, reports[1].params,
            "{mode:?}: workers differ"
        );
        assert!(reports[0].stats.iter().all(|s| s.is_some()));
        let diff = max_rel_diff(&reports[0].params, &single);
        assert!(
            diff <= SINGLE_PROCESS_TOL,
            "{mode:?} vs one process: {diff}"
        );
        by_mode.push(reports[0].params.clone());
    }
    // The shards sum the workers' gradients in worker order, so the three modes compute
    // bit-identical parameters: the tolerance between modes is zero.
    assert_eq!(by_mode[0], by_mode[1], "sequential vs fifo");
    assert_eq!(by_mode[0], by_mode[2], "sequential vs p3");
    let a = evaluate(&net, &by_mode[2], &data, 16).unwrap();
    let b = evaluate(&net, &single, &data, 16).unwrap();
    assert!((a.accuracy - b.accuracy).abs() <= 0.005, "{a:?} vs {b:?}");
}
