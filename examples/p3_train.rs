//! Train a real MLP (or the small CNN) with P3 on a localhost cluster of 2 workers and 2
//! server shards (every node its own thread and QUIC endpoint on 127.0.0.1).
//!
//! ```text
//! cargo run --release --example p3_train -- --epochs 5
//! cargo run --release --example p3_train -- --model cnn --epochs 3
//! cargo run --release --example p3_train -- --mode fifo --slice-size 256
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use petrel::ml::dnn::data::{Dataset, teacher_mlp, template_images};
use petrel::ml::dnn::{Sequential, SgdMomentum};
use petrel::net::NetConfig;
use petrel::p3::core::plan::Mode;
use petrel::p3::shells::{DnnStageModel, ModelFactory, P3Job, Progress, StageModel, run_cluster};

#[derive(Parser, Debug)]
struct Args {
    /// mlp (labels from a random teacher MLP, 32 features, 10 classes) or cnn (28x28 template images).
    #[arg(long, default_value = "mlp")]
    model: String,
    /// sequential, fifo or p3.
    #[arg(long, default_value = "p3")]
    mode: String,
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    /// Samples per worker per iteration.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 8192)]
    train: usize,
    #[arg(long, default_value_t = 512)]
    test: usize,
    /// Parameters per slice (p3 mode).
    #[arg(long, default_value_t = 1024)]
    slice_size: u64,
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

const WORKERS: usize = 2;
const SHARDS: usize = 2;

fn build(args: &Args) -> Result<(Sequential, Dataset, Dataset), String> {
    let n = args.train + args.test;
    let (net, data) = match args.model.as_str() {
        "mlp" => (
            Sequential::mlp(&[32, 64, 64, 10], args.seed).map_err(|e| e.to_string())?,
            teacher_mlp(n, 32, 48, 10, args.seed).map_err(|e| e.to_string())?,
        ),
        "cnn" => (
            Sequential::small_cnn(args.seed),
            template_images(n, 10, 28, 0.8, args.seed).map_err(|e| e.to_string())?,
        ),
        other => return Err(format!("unknown model {other:?} (mlp or cnn)")),
    };
    let train: Vec<usize> = (0..args.train).collect();
    let test: Vec<usize> = (args.train..n).collect();
    let split = |idx: &[usize]| {
        let (x, y) = data.select(idx);
        Dataset {
            x,
            y,
            n_classes: data.n_classes,
        }
    };
    Ok((net, split(&train), split(&test)))
}

#[derive(Default)]
struct Epoch {
    loss: f64,
    acc: f64,
    batches: u64,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let mode = Mode::parse(&args.mode).map_err(|e| e.to_string())?;
    let (net, train, test) = build(&args)?;
    let iters_per_epoch = (train.len() / (WORKERS * args.batch)).max(1) as u64;
    let iterations = iters_per_epoch * args.epochs;
    println!(
        "P3 training: {} ({} params in {} tensors), mode {}, {WORKERS} workers + {SHARDS} \
         shards on 127.0.0.1 (QUIC), {} train / {} test samples, batch {} per worker, {} \
         iterations per epoch",
        args.model,
        net.num_params(),
        net.param_counts().len(),
        mode.name(),
        train.len(),
        test.len(),
        args.batch,
        iters_per_epoch
    );
    let job = P3Job {
        mode,
        slice_size: args.slice_size,
        n_workers: WORKERS,
        n_shards: SHARDS,
        iterations,
        opt: SgdMomentum::new(args.lr, args.momentum),
        unit_counts: DnnStageModel::unit_counts(&net),
        initial: Arc::new(DnnStageModel::initial(&net)),
        net: NetConfig::default(),
        transport: petrel::actors::Transport::Quic,
        ask_timeout: Duration::from_secs(60),
    };

    let bar = ProgressBar::new(iterations);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} iterations {msg} [{elapsed_precise}]")
            .map_err(|e| e.to_string())?,
    );
    let epochs: Arc<Mutex<Vec<Epoch>>> = Arc::new(Mutex::new(
        (0..args.epochs).map(|_| Epoch::default()).collect(),
    ));
    let (b, e) = (bar.clone(), epochs.clone());
    let progress: Progress = Arc::new(move |worker, iter, stats| {
        let epoch = iter / iters_per_epoch;
        let Ok(mut all) = e.lock() else { return };
        let Some(ep) = all.get_mut(epoch as usize) else {
            return;
        };
        if let Some((loss, acc)) = stats {
            ep.loss += loss as f64;
            ep.acc += acc as f64;
            ep.batches += 1;
        }
        if worker == 0 {
            b.inc(1);
        }
        if ep.batches == iters_per_epoch * WORKERS as u64 {
            let n = ep.batches as f64;
            let line = format!(
                "epoch {:>2}: train loss {:.4}, train accuracy {:.1}%",
                epoch + 1,
                ep.loss / n,
                100.0 * ep.acc / n
            );
            b.suspend(|| println!("{line}"));
        }
    });

    let train = Arc::new(train);
    let seed = args.seed;
    let (model, batch) = (args.model.clone(), args.batch);
    let t = train.clone();
    let factory: ModelFactory = Arc::new(move |w| {
        let net = match model.as_str() {
            "cnn" => Sequential::small_cnn(seed),
            _ => Sequential::mlp(&[32, 64, 64, 10], seed).map_err(|e| e.to_string())?,
        };
        Ok(
            Box::new(DnnStageModel::new(net, (*t).clone(), batch, w, WORKERS)?)
                as Box<dyn StageModel>,
        )
    });
    let started = std::time::Instant::now();
    let reports = run_cluster(&job, factory, Some(progress))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();

    // Both workers must end with the shards' parameters; evaluate them on held-out data.
    let final_params = &reports.first().ok_or("no worker report")?.params;
    if reports.iter().any(|r| &r.params != final_params) {
        return Err("workers ended with different parameters".into());
    }
    let mut trained = net.clone();
    let views: Vec<&[f32]> = final_params.iter().map(|p| p.as_slice()).collect();
    trained.set_params(&views).map_err(|e| e.to_string())?;
    let (loss, acc) = trained
        .loss_and_accuracy(&test.x, &test.y)
        .map_err(|e| e.to_string())?;
    let mut untrained = net;
    let (loss0, acc0) = untrained
        .loss_and_accuracy(&test.x, &test.y)
        .map_err(|e| e.to_string())?;
    println!(
        "test: loss {loss0:.4} -> {loss:.4}, accuracy {:.1}% -> {:.1}% ({} iterations in {secs:.1} s, {:.0} samples/s)",
        100.0 * acc0,
        100.0 * acc,
        iterations,
        (iterations as usize * WORKERS * batch) as f64 / secs
    );
    Ok(())
}
