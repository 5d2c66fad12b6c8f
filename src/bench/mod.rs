//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.
//!
//! [`BenchError`] is the error of the runtime benchmarks ([`transport`], [`soak`],
//! [`chaos`]).

pub mod chaos;
// The application benchmarks document their own items.
#[allow(missing_docs)]
pub mod adarevision;
#[allow(missing_docs)]
pub mod consistency;
#[allow(missing_docs)]
pub mod lasso;
#[allow(missing_docs)]
pub mod lasso_scale;
#[allow(missing_docs)]
pub mod lasso_schedulers;
#[allow(missing_docs)]
pub mod lda;
pub mod lda_scale;
pub mod logistic_scale;
#[allow(missing_docs)]
pub mod managed;
pub mod memory_bandwidth;
#[allow(missing_docs)]
pub mod mf;
pub mod mf_scale;
#[allow(missing_docs)]
pub mod p3;
#[allow(missing_docs)]
pub mod p3_netns;
pub mod p3_real;
pub mod ps;
pub mod reproduce;
pub mod soak;
#[allow(missing_docs)]
pub mod strads_plot;
pub mod transport;

/// Why a runtime benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up a node or an actor failed.
    #[error(transparent)]
    Node(#[from] petrel_actors::NodeError),
    /// A transport could not start.
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    /// Certificates could not be made.
    #[error(transparent)]
    Tls(#[from] petrel_net::TlsError),
    /// A message could not be sent.
    #[error(transparent)]
    Ask(#[from] petrel_actors::AskError),
    /// The launched cluster failed.
    #[error(transparent)]
    Launch(#[from] crate::launcher::LaunchError),
    /// A raw quinn connection or stream failed.
    #[error("raw quinn: {0}")]
    Quinn(#[source] petrel_net::LinkCause),
    /// A file or runtime could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A measurement did not complete.
    #[error("{0}")]
    Incomplete(String),
    /// The figures could not be printed as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A `--net KEY=VALUE` override does not name a `[net]` knob or has a bad value.
    #[error("--net {given}: {reason}")]
    NetOverride {
        /// The override as given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The transport knobs with `--net KEY=VALUE` overrides applied (the `[net]` keys of the
/// settings; a value is read as JSON when it parses, as a string otherwise), so a benchmark
/// can measure one knob against the defaults.
pub fn net_config(overrides: &[String]) -> Result<petrel_net::NetConfig, BenchError> {
    let mut value = serde_json::to_value(petrel_net::NetConfig::default())?;
    for given in overrides {
        let bad = |reason: String| BenchError::NetOverride {
            given: given.clone(),
            reason,
        };
        let (key, raw) = given
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=VALUE".into()))?;
        let parsed = serde_json::from_str(raw.trim())
            .unwrap_or_else(|_| serde_json::Value::String(raw.trim().to_string()));
        match value.as_object_mut() {
            Some(map) => {
                map.insert(key.trim().to_string(), parsed);
            }
            None => return Err(bad("the [net] knobs are not a table".into())),
        }
        serde_json::from_value::<petrel_net::NetConfig>(value.clone())
            .map_err(|e| bad(e.to_string()))?;
    }
    Ok(serde_json::from_value(value)?)
}

impl BenchError {
    fn quinn(e: impl Into<petrel_net::LinkCause>) -> Self {
        BenchError::Quinn(e.into())
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_overrides_apply_and_bad_ones_name_the_key() {
        let cfg = net_config(&[
            "max_udp_payload=65527".into(),
            "congestion=bbr".into(),
            "segmentation_offload=false".into(),
        ])
        .unwrap();
        assert_eq!(cfg.max_udp_payload, 65527);
        assert_eq!(cfg.congestion, petrel_net::Congestion::Bbr);
        assert!(!cfg.segmentation_offload);
        let err = net_config(&["max_udp_paylod=1".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_udp_paylod"), "{err}");
        assert!(net_config(&["threads".into()]).is_err());
        assert!(net_config(&["threads=many".into()]).is_err());
    }
}
