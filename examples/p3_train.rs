//! Train a candle MLP (or a LeNet-style CNN) with P3 on a localhost cluster of 2 workers
//! and 2 server shards (every node its own thread and QUIC endpoint on 127.0.0.1), in one
//! process. `petrel train p3` runs the same models with nodes as separate processes.
//!
//! ```text
//! cargo run --release --example p3_train -- --epochs 5
//! cargo run --release --example p3_train -- --model cnn --epochs 3
//! cargo run --release --example p3_train -- --mode fifo --slice-size 256
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use petrel::ml::dnn::FlatSgdMomentum;
use petrel::ml::dnn::data::{Dataset, teacher_mlp, template_images};
use petrel::net::NetConfig;
use petrel::p3::models::{nets, staged};
use petrel::p3::{CandleStageModel, Mode, P3Job, Progress, StagedNet, run_cluster};

type BoxError = Box<dyn std::error::Error>;

/// Which network to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Net {
    /// Labels from a random teacher MLP, 32 features, 10 classes.
    Mlp,
    /// 28x28 template images, 10 classes (LeNet layout).
    Cnn,
}

impl Net {
    fn build(self) -> StagedNet {
        match self {
            Net::Mlp => nets::mlp(&[32], &[32, 64, 64, 10]),
            Net::Cnn => nets::lenet(1, 28, 10),
        }
    }
}

/// Train a network with P3 on a localhost cluster of 2 workers and 2 shards.
#[derive(Parser, Debug)]
struct P3TrainArgs {
    /// The network and its data.
    #[arg(long, value_enum, default_value = "mlp")]
    model: Net,
    /// Synchronisation: sequential, fifo or p3.
    #[arg(long, value_enum, default_value = "p3")]
    mode: Mode,
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

fn build(args: &P3TrainArgs) -> Result<(StagedNet, Dataset, Dataset), BoxError> {
    let n = args.train + args.test;
    let net = args.model.build();
    let data = match args.model {
        Net::Mlp => teacher_mlp(n, 32, 48, 10, args.seed)?,
        Net::Cnn => template_images(n, 10, 28, 0.8, args.seed)?,
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

fn main() -> Result<(), BoxError> {
    let args = P3TrainArgs::parse();
    let mode = args.mode;
    let (net, train, test) = build(&args)?;
    let (_, initial) = net.init(args.seed)?;
    let iters_per_epoch = (train.len() / (WORKERS * args.batch)).max(1) as u64;
    let iterations = iters_per_epoch * args.epochs;
    println!(
        "P3 training: {} ({} params in {} tensors), mode {}, {WORKERS} workers + {SHARDS} \
         shards on 127.0.0.1 (QUIC), {} train / {} test samples, batch {} per worker, {} \
         iterations per epoch",
        format!("{:?}", args.model).to_lowercase(),
        initial.iter().map(Vec::len).sum::<usize>(),
        initial.len(),
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
        opt: FlatSgdMomentum::new(args.lr, args.momentum),
        initial: Arc::new(initial.clone()),
        net: NetConfig::default(),
        transport: petrel::actors::Transport::Quic,
        ask_timeout: Duration::from_secs(60),
        checkpoint: None,
    };

    let bar = ProgressBar::new(iterations);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} iterations {msg} [{elapsed_precise}]",
    )?);
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
        if let Some(s) = stats {
            ep.loss += s.loss as f64;
            ep.acc += s.accuracy as f64;
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
    let batch = args.batch;
    let (n2, i2, t2) = (net.clone(), initial.clone(), train.clone());
    let factory = move |w| CandleStageModel::new(n2.clone(), &i2, t2.clone(), batch, w, WORKERS);
    let started = std::time::Instant::now();
    let reports = run_cluster(&job, factory, Some(progress))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();

    // Both workers must end with the shards' parameters; evaluate them on held-out data.
    let final_params = &reports.first().ok_or("no worker report")?.params;
    if reports.iter().any(|r| &r.params != final_params) {
        return Err("workers ended with different parameters".into());
    }
    let after = staged::evaluate(&net, final_params, &test, 256)?;
    let before = staged::evaluate(&net, &initial, &test, 256)?;
    let (loss0, acc0, loss, acc) = (before.loss, before.accuracy, after.loss, after.accuracy);
    println!(
        "test: loss {loss0:.4} -> {loss:.4}, accuracy {:.1}% -> {:.1}% ({} iterations in {secs:.1} s, {:.0} samples/s)",
        100.0 * acc0,
        100.0 * acc,
        iterations,
        (iterations as usize * WORKERS * batch) as f64 / secs
    );
    Ok(())
}
