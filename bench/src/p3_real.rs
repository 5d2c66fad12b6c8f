//! `petrel bench p3-real`: P3 on real compute (`petrel train p3`'s job): a candle model
//! trained by 2 workers and 2 shards as processes on shaped links, sequential, fifo and p3
//! side by side (images/s, test accuracy), plus the adapter's overhead against candle's
//! whole-model pass.

use crate::common::{json_table, upper_median};
use crate::p3::slowest;
use petrel::CliError;
use petrel::report::print_json;
use petrel::train::p3::{RealJobArgs, job_run_dir, run_processes};
use petrel_ml::MlError;
use petrel_ml::dnn::cifar::synthetic_cifar;
use petrel_ml::dnn::data::{Dataset, gaussian_clusters};
use petrel_p3::roles::WorkerReportFile;
use petrel_p3::{CandleStageModel, Mode, StageModel, StagedNet};
use serde::Serialize;

use std::sync::Arc;
use std::time::{Duration, Instant};

/// `petrel bench p3-real`.
#[derive(clap::Args, Debug, Clone)]
pub struct P3RealBenchArgs {
    /// Models to run (resnet18, vgg11, lenet, mlp).
    #[arg(long, value_delimiter = ',', default_values_t = ["resnet18".to_string(), "vgg11".to_string()])]
    pub models: Vec<String>,
    /// Measured iterations per mode (after the warm-up).
    #[arg(long, default_value_t = 16)]
    pub iterations: u64,
    /// Warm-up iterations per mode (not measured).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Iterations of the adapter-overhead measurement (stage-wise vs whole-model; medians).
    #[arg(long, default_value_t = 9)]
    pub overhead_iterations: u64,
    /// Measure only the adapter's overhead (no cluster runs).
    #[arg(long)]
    pub overhead_only: bool,
    /// Cluster, data and optimiser flags.
    #[command(flatten)]
    pub job: RealJobArgs,
}

/// The adapter's cost per iteration, in this process: stage-wise forward and backward,
/// installing every tensor (paid before both ways), candle's own forward and backward and
/// their sum, and `overhead`: the median of stage-wise over whole-model time, minus 1.
#[derive(Serialize, Debug, Clone, Copy)]
struct AdapterOverhead {
    stagewise_forward_ms: f64,
    stagewise_backward_ms: f64,
    set_tensors_ms: f64,
    whole_forward_ms: f64,
    whole_backward_ms: f64,
    whole_model_ms: f64,
    overhead: f64,
}

/// `n` examples shaped like a model's inputs `input`, for timing only: CIFAR-like images
/// for 3x32x32, Gaussian clusters reshaped to `input` otherwise (e.g. 1x28x28 IDX images).
fn timing_data(input: &[usize], n: usize) -> Result<Dataset, MlError> {
    if input == [3, 32, 32] {
        return synthetic_cifar(n, 10, 0.3, 1);
    }
    let d = gaussian_clusters(n, input.iter().product(), 10, 0.3, 1)?;
    let shape: Vec<usize> = std::iter::once(n).chain(input.iter().copied()).collect();
    let x =
        d.x.into_shape_with_order(shape)
            .map_err(|e| MlError::InvalidArgument(format!("timing data {input:?}: {e}")))?;
    Ok(Dataset { x, ..d })
}

/// Measures [`AdapterOverhead`] for `net`, alternating the two ways `iters` times after a
/// warm-up, each from freshly installed tensors as every P3 iteration does.
fn adapter_overhead(
    net: &StagedNet,
    batch: usize,
    iters: u64,
) -> Result<(AdapterOverhead, usize), CliError> {
    let real = |source| petrel_p3::P3Error::RealModel {
        name: net.name().to_string(),
        source: Box::new(source),
    };
    let (_, initial) = net.init(1).map_err(real)?;
    let data = Arc::new(timing_data(net.input_shape(), 4 * batch).map_err(petrel_p3::P3Error::Ml)?);
    let mut m = CandleStageModel::new(net.clone(), &initial, data, batch, 0, 1).map_err(real)?;
    let n = m.stage_tensors().len();
    let install = |m: &mut CandleStageModel| -> Result<f64, CliError> {
        let t = Instant::now();
        for (k, v) in initial.iter().enumerate() {
            m.set_tensor(k, v).map_err(real)?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    // Per iteration: (stage-wise fwd, bwd, set, whole fwd, whole bwd) seconds; the ways
    // alternate going first, so a burst of outside load hits one pair, not the median.
    let mut samples: Vec<[f64; 5]> = Vec::new();
    for i in 0..=iters {
        let stagewise = |m: &mut CandleStageModel| -> Result<[f64; 3], CliError> {
            let t_set = install(m)?;
            let t = Instant::now();
            for s in 0..n {
                m.forward_stage(i, s).map_err(real)?;
            }
            let t_fwd = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for s in (0..n).rev() {
                m.backward_stage(s).map_err(real)?;
            }
            Ok([t_fwd, t.elapsed().as_secs_f64(), t_set])
        };
        let whole = |m: &mut CandleStageModel| -> Result<[f64; 2], CliError> {
            install(m)?;
            let (_, w_fwd, w_bwd) = m.whole_model_pass(i).map_err(real)?;
            Ok([w_fwd.as_secs_f64(), w_bwd.as_secs_f64()])
        };
        let (st, wh) = if i % 2 == 0 {
            let st = stagewise(&mut m)?;
            (st, whole(&mut m)?)
        } else {
            let wh = whole(&mut m)?;
            (stagewise(&mut m)?, wh)
        };
        if i > 0 {
            samples.push([st[0], st[1], st[2], wh[0], wh[1]]);
        }
    }
    let column = |c: usize| upper_median(samples.iter().map(|s| s[c] * 1e3).collect());
    let ratio = upper_median(
        samples
            .iter()
            .map(|s| (s[0] + s[1]) / (s[3] + s[4]).max(1e-12))
            .collect(),
    );
    let params: usize = initial.iter().map(Vec::len).sum();
    let (whole_fwd, whole_bwd) = (column(3), column(4));
    Ok((
        AdapterOverhead {
            stagewise_forward_ms: column(0),
            stagewise_backward_ms: column(1),
            set_tensors_ms: column(2),
            whole_forward_ms: whole_fwd,
            whole_backward_ms: whole_bwd,
            whole_model_ms: whole_fwd + whole_bwd,
            overhead: ratio - 1.0,
        },
        params,
    ))
}

#[derive(Serialize)]
struct ModelFigures {
    sequential_ips: f64,
    fifo_ips: f64,
    p3_ips: f64,
    p3_over_sequential: f64,
    p3_over_fifo: f64,
    accuracy: serde_json::Map<String, serde_json::Value>,
    bandwidth_mbit: f64,
    compute_ms_per_iter: f64,
    params: usize,
    width: usize,
    batch: usize,
    adapter: AdapterOverhead,
}

/// `petrel bench p3-real`.
pub fn run(args: P3RealBenchArgs) -> Result<(), CliError> {
    let (run_dir, _temp) = job_run_dir(args.job.run_dir.as_deref())?;
    if args.iterations == 0 || args.job.workers == 0 || args.job.batch == 0 {
        return Err(CliError::Args(
            "--iterations, --workers and --batch must be >= 1".into(),
        ));
    }
    let mut figures = serde_json::Map::new();
    let (mut table, mut overheads) = (Vec::new(), Vec::new());
    for model in &args.models {
        let probe = args.job.node_config(model, Mode::P3, 1, &run_dir);
        let net = probe
            .real_net(&probe.input_shape()?)?
            .ok_or_else(|| CliError::Args("--models: empty name".into()))?;
        let (overhead, params) = adapter_overhead(&net, args.job.batch, args.overhead_iterations)?;
        overheads.push(serde_json::json!({"model": model, "params": params, "adapter": overhead}));
        if args.overhead_only {
            figures.insert(
                model.clone(),
                serde_json::json!({ "params": params, "batch": args.job.batch, "adapter": overhead }),
            );
            continue;
        }
        // The workers share the cores, so each computes about `workers` times slower than
        // measured above; one model transfer then takes one iteration's compute: M = C.
        let compute_s = overhead.whole_model_ms / 1e3 * args.job.workers as f64;
        let bandwidth = args
            .job
            .bandwidth_mbit
            .unwrap_or_else(|| (params as f64 * 4.0 * 8.0 / 1e6) / compute_s.max(1e-3));
        let net_cfg = args.job.net_config(bandwidth);
        let mut ips = [0.0f64; 3];
        let mut accuracy = serde_json::Map::new();
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let dir = run_dir.join(format!("{model}-{}", mode.name()));
            let cfg = args
                .job
                .node_config(model, mode, args.warmup + args.iterations, &dir);
            let reports = run_processes(
                &cfg,
                &net_cfg,
                &dir,
                Duration::from_secs(args.job.timeout_s),
            )?;
            let skip = args.warmup as usize;
            let worst = slowest(&reports, skip, WorkerReportFile::secs_per_iter)?;
            ips[i] = (args.job.workers * args.job.batch) as f64 / worst.max(1e-12);
            let acc = reports.first().and_then(|r| r.test).map(|t| t.accuracy);
            accuracy.insert(mode.name().into(), serde_json::json!(acc));
            table.push(serde_json::json!({
                "model": model, "mode": mode.name(), "mbit": bandwidth, "ips": ips[i],
                "vs_sequential": ips[i] / ips[0].max(1e-12), "test_accuracy": acc,
            }));
            let _ = std::fs::remove_dir_all(&dir);
        }
        figures.insert(
            model.clone(),
            serde_json::to_value(ModelFigures {
                sequential_ips: ips[0],
                fifo_ips: ips[1],
                p3_ips: ips[2],
                p3_over_sequential: ips[2] / ips[0].max(1e-12),
                p3_over_fifo: ips[2] / ips[1].max(1e-12),
                accuracy,
                bandwidth_mbit: bandwidth,
                compute_ms_per_iter: compute_s * 1e3,
                params,
                width: args.job.width,
                batch: args.job.batch,
                adapter: overhead,
            })
            .map_err(CliError::JsonOutput)?,
        );
    }
    if !args.overhead_only {
        println!(
            "P3 on real compute (candle): {} workers + {} shards as processes on 127.0.0.1, \
             links shaped so that one model transfer ~ one iteration's compute",
            args.job.workers, args.job.shards
        );
        json_table(&table, "model mode mbit ips vs_sequential test_accuracy").print();
    }
    println!(
        "adapter overhead per iteration (batch {}, this process, no network):",
        args.job.batch
    );
    let keys = "model params adapter/stagewise_forward_ms adapter/stagewise_backward_ms \
                adapter/whole_forward_ms adapter/whole_backward_ms adapter/set_tensors_ms \
                adapter/overhead";
    json_table(&overheads, keys).print();
    print_json(&serde_json::Value::Object(figures)).map_err(CliError::JsonOutput)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_data_takes_the_model_input_shape() {
        for input in [vec![3, 32, 32], vec![1, 28, 28], vec![1, 20, 12], vec![64]] {
            let d = timing_data(&input, 8).unwrap();
            assert_eq!((d.len(), d.example_shape()), (8, &input[..]));
        }
    }

    #[test]
    fn adapter_overhead_runs_on_idx_shaped_models() {
        for name in ["lenet", "mlp"] {
            let net = petrel_p3::models::nets::by_name(name, &[1, 28, 28], 1, 10).unwrap();
            let (o, params) = adapter_overhead(&net, 2, 1).unwrap();
            assert!(params > 0 && o.whole_model_ms > 0.0, "{name}: {o:?}");
        }
    }
}
