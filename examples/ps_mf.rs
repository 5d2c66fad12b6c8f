//! Matrix factorization on a localhost parameter-server cluster under SSP(3).
//!
//! Every node is a thread of this process talking QUIC over 127.0.0.1: two shard nodes (the
//! first also runs the monitor) and three workers. Pass a ratings file (`user item rating`
//! triplets, e.g. MovieLens `u.data`, or MatrixMarket) to train on it; synthetic low-rank data
//! otherwise. `cargo run --release --example ps_mf -- [ratings-file]`

use petrel::actors::Transport;
use petrel::ps::kit::settings::RunFiles;
use petrel::ps::{ConsistencyModel, PsMf, PsMfSettings, run_local};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    petrel::init_tracing();
    let out = std::env::temp_dir().join("petrel-ps-mf");
    let cfg = PsMfSettings {
        data: std::env::args().nth(1).map(Into::into),
        consistency: ConsistencyModel::Ssp,
        staleness: 3,
        rank: 8,
        learning_rate: 0.05,
        regularization: 0.02,
        init_scale: 0.3,
        max_clocks: Some(80),
        files: RunFiles {
            out: Some(out.clone()),
            ..RunFiles::default()
        },
        ..PsMfSettings::default()
    };
    let r = run_local::<PsMf>(cfg, 2, 3, Transport::Quic)?.metrics;
    println!(
        "SSP(3), {} workers / {} shards: test RMSE {:.4} -> {:.4} after {:?} clocks in {:.1}s; \
         staleness mean {:.2} max {}",
        r.n_workers,
        r.n_shards,
        r.initial_rmse,
        r.final_rmse,
        r.worker_clocks,
        r.wall_s,
        r.staleness.mean,
        r.staleness.max
    );
    println!("model and metrics in {}", out.display());
    Ok(())
}
