//! Matrix factorization on a localhost parameter-server cluster under SSP(3).
//!
//! Every node is a thread of this process talking QUIC over 127.0.0.1: two shard nodes (the
//! first also runs the monitor) and three workers. Pass a ratings file (`user item rating`
//! triplets, e.g. MovieLens `u.data`, or MatrixMarket) to train on it; synthetic low-rank data
//! otherwise. `cargo run --release --example ps_mf -- [ratings-file]`

use petrel::ps::apps::mf::{MfConfig, run_local};

fn main() -> Result<(), String> {
    petrel::init_tracing();
    let out = std::env::temp_dir().join("petrel-ps-mf");
    let cfg = MfConfig {
        data: std::env::args().nth(1).map(Into::into),
        consistency: "ssp".into(),
        staleness: 3,
        max_clocks: 80,
        out: Some(out.clone()),
        ..MfConfig::default()
    };
    let r = run_local(cfg, 2, 3, "quic")?;
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
