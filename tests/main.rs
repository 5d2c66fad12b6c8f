//! The integration tests, one module per file, built as one test binary: its tests share
//! the 2 cores better than two dozen binaries run one after another, and it links once.
//! `cargo test --test integration cli::` runs one file's tests.

mod common;

mod chaos_hostile_member;
mod chaos_link_cut;
mod chaos_membership;
mod chaos_slow_worker;
mod cli;
mod elastic_p3;
mod elastic_ps;
mod elastic_strads;
mod examples_run;
mod fuzz_regressions;
mod heldout_history;
mod hostile_inputs;
mod launch_errors;
mod launch_progress;
mod model_roundtrip;
mod netns;
mod no_orphans;
mod observe;
mod observe_http;
mod p3_netns;
#[cfg(feature = "candle")]
mod p3_train_cli;
mod pinned_outputs;
mod ps_cluster;
mod ps_history;
mod ps_lda;
mod ps_server_push;
mod readme_commands;
mod restart_checkpoint_message;
mod run_dirs;
mod saved_model_checks;
mod settings_checks;
mod standby_after_end;
mod strads_apps;
mod strads_checkpoint;
mod strads_lasso;
mod strads_lasso_gs;
mod strads_multi;
mod strads_squared_hinge;
mod train_config;
mod train_outputs;
