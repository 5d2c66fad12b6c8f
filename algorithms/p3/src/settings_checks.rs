//! The range checks of `[app.p3]` ([`P3Settings::validate`]), run before any node starts
//! (`petrel train p3`, and `Cluster::check_settings` for `petrel run` and `petrel node`).

use petrel_ml::job::{InvalidSetting, SettingChecks};

use crate::roles::P3Settings;

/// The largest SGD learning rate accepted. Momentum SGD on these networks diverges well
/// below it; anything larger is a typo (`1e3` for `1e-3`), not a tuning.
pub const MAX_LR: f32 = 10.0;

/// The most workers or shards of one job: each is a node (a process with `petrel train p3`).
pub const MAX_NODES: usize = 1024;

impl P3Settings {
    /// Every value in range (keys as in `[app.p3]`): at least one worker, shard, iteration
    /// and sample; `lr` finite in (0, [`MAX_LR`]]; `momentum` finite in [0, 1) (at 1 or
    /// above the velocity never decays).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        for (key, n) in [("workers", self.workers), ("shards", self.shards)] {
            c.at_least(key, n, 1);
            c.at_most(key, n, MAX_NODES, "one node each");
        }
        c.at_least("iterations", self.iterations, 1);
        c.at_least("batch", self.batch, 1);
        c.at_least("slice_size", self.slice_size, 1);
        c.require(
            self.lr.is_finite() && self.lr > 0.0 && self.lr <= MAX_LR,
            "lr",
            self.lr,
            "must be a finite number in (0, 10]",
        );
        c.require(
            self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum),
            "momentum",
            self.momentum,
            "must be a finite number in [0, 1)",
        );
        c.positive("scale", self.scale);
        c.positive("device_gflops", self.device_gflops);
        c.at_least("ask_timeout_ms", self.ask_timeout_ms, 1);
        if !self.net.is_empty() {
            c.at_least("width", self.width, 1);
        }
        c.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_pass() {
        P3Settings::default().validate().unwrap();
    }

    #[test]
    fn values_out_of_range_are_refused_naming_the_key() {
        let cases: Vec<(P3Settings, &str)> = vec![
            (
                P3Settings {
                    lr: 100.0,
                    ..P3Settings::default()
                },
                "lr = 100: must be a finite number in (0, 10]",
            ),
            (
                P3Settings {
                    lr: f32::NAN,
                    ..P3Settings::default()
                },
                "lr = NaN",
            ),
            (
                P3Settings {
                    lr: 1e30,
                    ..P3Settings::default()
                },
                "lr = 1000000000000000000000000000000",
            ),
            (
                P3Settings {
                    lr: 0.0,
                    ..P3Settings::default()
                },
                "lr = 0",
            ),
            (
                P3Settings {
                    momentum: 1.0,
                    ..P3Settings::default()
                },
                "momentum = 1: must be a finite number in [0, 1)",
            ),
            (
                P3Settings {
                    workers: 0,
                    ..P3Settings::default()
                },
                "workers = 0: must be >= 1",
            ),
            (
                P3Settings {
                    shards: 0,
                    ..P3Settings::default()
                },
                "shards = 0: must be >= 1",
            ),
            (
                P3Settings {
                    workers: 100_000,
                    ..P3Settings::default()
                },
                "workers = 100000: must be <= 1024",
            ),
        ];
        for (cfg, want) in cases {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e} does not start with {want}");
        }
    }
}
