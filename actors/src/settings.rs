//! Settings, loaded with the `config` crate from a TOML file and `PETREL_*` environment
//! variables (`PETREL_CLUSTER__FAILURE_TIMEOUT_MS=2000`, `PETREL_NET__THREADS=2`; nested keys
//! use a double underscore). Defaults run on a laptop.

use crate::error::NodeError;
use petrel_net::NetConfig;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::path::{Path, PathBuf};

/// How the nodes of a cluster reach each other. Read from `cluster.transport` in TOML
/// (an unknown value is rejected when the settings are read, naming the valid ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// QUIC with mutual TLS, also between threads of one process on 127.0.0.1.
    #[default]
    Quic,
    /// In-memory channels: every node is a thread of this process.
    Memory,
}

/// How a local job (`petrel train`, `petrel bench`) runs its cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum JobTransport {
    /// Nodes are threads of this process, connected by in-memory channels.
    Memory,
    /// Nodes are threads of this process, connected by QUIC on 127.0.0.1.
    #[default]
    Quic,
    /// One process per node (`petrel node`), connected by QUIC on 127.0.0.1.
    Processes,
}

/// What the cluster does when a member dies (is silent for `failure_timeout_ms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnNodeDeath {
    /// The run fails on every node, naming the dead one (and `--max-restarts` restarts it
    /// from the newest checkpoint).
    #[default]
    Fail,
    /// The dead node is taken as having left: a new membership epoch without it, and the
    /// others carry on. For jobs that hand a departed member's work to the others.
    Leave,
}

impl JobTransport {
    /// The transport between the nodes.
    pub fn cluster_transport(self) -> Transport {
        match self {
            JobTransport::Memory => Transport::Memory,
            JobTransport::Quic | JobTransport::Processes => Transport::Quic,
        }
    }
}

/// The value of `T` when no flag is given: the defaults its clap attributes name, so a
/// settings struct that is also a flag block writes each default once, on its flag.
///
/// # Panics
///
/// If `T` has a required flag (a programming error).
pub fn flag_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let no_flags: [&str; 0] = [];
    command
        .try_get_matches_from(no_flags)
        .and_then(|matches| T::from_arg_matches(&matches))
        .unwrap_or_else(|e| panic!("a flag block without defaults: {e}"))
}

macro_rules! choice_text {
    ($ty:ty, $kind:expr) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let value = clap::ValueEnum::to_possible_value(self)
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default();
                f.write_str(&value)
            }
        }

        impl std::str::FromStr for $ty {
            type Err = NodeError;
            fn from_str(s: &str) -> Result<Self, NodeError> {
                <$ty as clap::ValueEnum>::from_str(s, true).map_err(|_| {
                    let valid: Vec<String> = <$ty as clap::ValueEnum>::value_variants()
                        .iter()
                        .map(|v| v.to_string())
                        .collect();
                    NodeError::UnknownChoice {
                        kind: $kind,
                        value: s.to_string(),
                        valid: valid.join(", "),
                    }
                })
            }
        }

        // Read through `FromStr`, so that a bad value's error lists the valid ones.
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
choice_text!(Transport, "transport");
choice_text!(JobTransport, "job transport");
choice_text!(OnNodeDeath, "on_node_death");

/// `[cluster]`: the cluster's name, coordinator, certificates, transport and timeouts. An
/// unknown key is rejected when the settings are read, naming it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// The cluster's name (in logs and run directories).
    pub name: String,
    /// Node that runs the coordinator (membership, failure detection, barriers). Default:
    /// the first node.
    pub coordinator: Option<String>,
    /// Directory with `ca.pem` and `<node>.pem`/`<node>.key` (see `petrel certs`); a
    /// relative path is relative to the settings file. `petrel run` creates one when unset.
    pub certs_dir: Option<PathBuf>,
    /// How nodes reach each other: `quic` (default) or `memory` (in-process clusters only).
    pub transport: Transport,
    /// How often nodes and the coordinator send heartbeats.
    pub heartbeat_interval_ms: u64,
    /// A node silent for this long is declared dead; pending requests to it fail.
    pub failure_timeout_ms: u64,
    /// Default timeout of `ask`.
    pub request_timeout_ms: u64,
    /// How long a node tries to reach the coordinator and wait for all members.
    pub join_timeout_ms: u64,
    /// A membership plan for testing elastic jobs ([`crate::scale::ScalePlan`]), e.g.
    /// `"at=2s add worker; at=5s remove w1"`: the launcher starts the added standby nodes
    /// and the coordinator asks the removed members to drain and leave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<String>,
    /// What a member's death does: `fail` the run (default) or count as a `leave`.
    pub on_node_death: OnNodeDeath,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            name: "petrel".into(),
            coordinator: None,
            certs_dir: None,
            transport: Transport::Quic,
            heartbeat_interval_ms: 250,
            failure_timeout_ms: 2000,
            request_timeout_ms: 30_000,
            join_timeout_ms: 30_000,
            scale: None,
            on_node_death: OnNodeDeath::Fail,
        }
    }
}

pub use petrel_net::tls::MAX_NODE_NAME_LEN;

/// Checks a node name wherever one is read (settings, `--node`, `petrel certs --nodes`);
/// see [`petrel_net::tls::check_node_name`].
pub fn validate_node_name(name: &str) -> Result<(), NodeError> {
    petrel_net::tls::check_node_name(name).map_err(|e| NodeError::InvalidNodeName {
        name: e.name,
        why: e.why,
    })
}

/// One `[[nodes]]` entry: a node's name, address and roles. An unknown key is rejected.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's unique name.
    pub name: String,
    /// UDP address to bind and to be reached at, e.g. "127.0.0.1:7000". Port 0 lets
    /// `petrel run` choose free ports.
    pub addr: String,
    /// Roles this node runs (names registered with [`crate::Cluster::role`]).
    pub roles: Vec<String>,
    /// TCP address for OpenMetrics text at `/metrics` (unset: none; port 0: a free port;
    /// `petrel run` gives every node a free loopback port unless set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    /// A standby node: the cluster forms without it, and it joins the running cluster
    /// when it is started (by a scale plan or by hand). Its address and certificate are
    /// in the settings like every other node's, so identity checks stay as they are.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub standby: bool,
}

/// Everything a node needs to know about its cluster.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Settings {
    /// `[cluster]`.
    pub cluster: ClusterSettings,
    /// `[[nodes]]`, in id order (a node's id is its position).
    pub nodes: Vec<NodeSpec>,
    /// `[net]`: the transport's knobs.
    pub net: NetConfig,
    /// Application sections (`[app.mf]`, ...), read with [`Settings::app`].
    pub app: AppSections,
}

/// The `[app.*]` sections by name, schemaless until a role reads one with [`Settings::app`].
pub type AppSections = std::collections::BTreeMap<String, serde_json::Value>;

/// The top-level tables of a settings file.
const TOP_LEVEL: [&str; 4] = ["cluster", "nodes", "net", "app"];

/// A `map_err` for the settings parser's errors, naming `origin`.
fn settings_err(origin: &str) -> impl FnOnce(config::ConfigError) -> NodeError + '_ {
    move |source| NodeError::Settings {
        origin: origin.to_string(),
        source: Box::new(source),
    }
}

/// Refuses a top-level table no one reads (a misspelt `[clustr]` would otherwise be
/// ignored and its values silently replaced by defaults).
fn check_top_level(origin: &str, parsed: &config::Config) -> Result<(), NodeError> {
    let top: serde_json::Map<String, serde_json::Value> = parsed
        .clone()
        .try_deserialize()
        .map_err(settings_err(origin))?;
    match top.keys().find(|k| !TOP_LEVEL.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(settings_err(origin)(config::ConfigError::Message(format!(
            "unknown table [{key}]; settings hold [cluster], [[nodes]], [net] and [app.<name>]"
        )))),
    }
}

impl Settings {
    /// Loads a TOML file, then applies `PETREL_*` environment overrides.
    pub fn load(path: &Path) -> Result<Self, NodeError> {
        let origin = path.display().to_string();
        let file = || config::File::from(path).format(config::FileFormat::Toml);
        // The file's tables are checked alone: the environment holds PETREL_* variables
        // that are not settings (PETREL_DATA__*, PETREL_LAUNCH_DIR).
        let file_only = config::Config::builder().add_source(file()).build();
        check_top_level(&origin, &file_only.map_err(settings_err(&origin))?)?;
        let env = config::Environment::with_prefix("PETREL")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true);
        let built = config::Config::builder()
            .add_source(file())
            .add_source(env)
            .build();
        let mut s: Settings = built
            .and_then(|b| b.try_deserialize())
            .map_err(settings_err(&origin))?;
        // A relative `certs_dir` means "next to this file", wherever the command runs.
        if let (Some(dir), Some(base)) = (&s.cluster.certs_dir, path.parent())
            && dir.is_relative()
        {
            s.cluster.certs_dir = Some(base.join(dir));
        }
        s.validate()?;
        Ok(s)
    }

    /// Parses TOML text (environment overrides are not applied).
    pub fn from_toml(text: &str) -> Result<Self, NodeError> {
        let built = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .map_err(settings_err("text"))?;
        check_top_level("text", &built)?;
        let s: Settings = built.try_deserialize().map_err(settings_err("text"))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks what serde cannot: at least one node, unique names, a known coordinator,
    /// sensible failure timing, `[net]` knobs in range ([`NetConfig::validate`]).
    pub fn validate(&self) -> Result<(), NodeError> {
        self.net
            .validate()
            .map_err(|e| NodeError::Config(e.to_string()))?;
        if self.nodes.is_empty() {
            return Err(NodeError::Config("no [[nodes]] defined".into()));
        }
        // The name becomes part of run-directory paths: node-name rules keep it one component.
        petrel_net::tls::check_node_name(&self.cluster.name).map_err(|e| {
            NodeError::Config(format!(
                "cluster.name {:?}: {}; names are 1 to 63 characters from a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit",
                e.name, e.why
            ))
        })?;
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            validate_node_name(&n.name)?;
            if !seen.insert(n.name.as_str()) {
                let why = format!("node name {} appears twice", n.name);
                return Err(NodeError::Config(why));
            }
        }
        let mut ports = std::collections::HashMap::new();
        for n in &self.nodes {
            let fixed = n.addr.rsplit_once(':').is_some_and(|(_, p)| p != "0");
            if fixed && let Some(other) = ports.insert(n.addr.as_str(), n.name.as_str()) {
                let why = format!("nodes {other} and {} both use address {}", n.name, n.addr);
                return Err(NodeError::Config(why));
            }
        }
        if let Some(c) = &self.cluster.coordinator
            && !seen.contains(c.as_str())
        {
            return Err(NodeError::Config(format!("coordinator {c} is not a node")));
        }
        let coordinator = self.coordinator_name();
        if self
            .nodes
            .iter()
            .any(|n| n.standby && n.name == coordinator)
        {
            let why = format!("the coordinator {coordinator} cannot be a standby node");
            return Err(NodeError::Config(why));
        }
        self.scale_plan()?;
        if self.cluster.heartbeat_interval_ms == 0
            || self.cluster.failure_timeout_ms <= self.cluster.heartbeat_interval_ms
        {
            return Err(NodeError::Config(
                "cluster.failure_timeout_ms must exceed cluster.heartbeat_interval_ms > 0".into(),
            ));
        }
        Ok(())
    }

    /// Whether members may join or leave a running job: a standby node, a scale plan or
    /// `on_node_death = "leave"`. Such a node drains and leaves on SIGTERM.
    pub fn allows_membership_changes(&self) -> bool {
        self.cluster.scale.is_some()
            || self.cluster.on_node_death == OnNodeDeath::Leave
            || self.nodes.iter().any(|n| n.standby)
    }

    /// `[cluster] scale`, read and resolved to node names (empty when unset).
    pub fn scale_plan(&self) -> Result<crate::scale::ScalePlan, NodeError> {
        match &self.cluster.scale {
            Some(plan) => crate::scale::ScalePlan::parse(plan)?.resolve(self),
            None => Ok(crate::scale::ScalePlan::default()),
        }
    }

    /// The node that runs the coordinator (`cluster.coordinator`, else the first node).
    pub fn coordinator_name(&self) -> &str {
        self.cluster
            .coordinator
            .as_deref()
            .or_else(|| self.nodes.first().map(|n| n.name.as_str()))
            .unwrap_or("")
    }

    /// A node's id is its position in `nodes`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Reads an application section, e.g. `settings.app::<MfConfig>("mf")`; a missing
    /// section gives `T::default()`.
    pub fn app<T: DeserializeOwned + Default>(&self, section: &str) -> Result<T, NodeError> {
        match self.app.get(section) {
            None => Ok(T::default()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|source| NodeError::AppSection {
                section: section.to_string(),
                source,
            }),
        }
    }

    /// Renders the settings as TOML (the launcher hands resolved settings to children).
    pub fn to_toml(&self) -> Result<String, NodeError> {
        toml::to_string(self).map_err(NodeError::WriteSettings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let s = Settings::from_toml(
            r#"
            [cluster]
            name = "t"
            failure_timeout_ms = 900
            [[nodes]]
            name = "a"
            addr = "127.0.0.1:0"
            roles = ["x"]
            [[nodes]]
            name = "b"
            [net]
            max_message_bytes = 2048
            [app.demo]
            rounds = 3
            "#,
        )
        .unwrap();
        assert_eq!(s.cluster.failure_timeout_ms, 900);
        assert_eq!(s.coordinator_name(), "a");
        assert_eq!(s.net.max_message_bytes, 2048);
        #[derive(Deserialize, Default)]
        struct Demo {
            rounds: u32,
        }
        assert_eq!(s.app::<Demo>("demo").unwrap().rounds, 3);
        let back = Settings::from_toml(&s.to_toml().unwrap()).unwrap();
        assert_eq!(back.nodes, s.nodes);
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(Settings::from_toml("[cluster]\nname='x'").is_err());
        assert!(Settings::from_toml("[[nodes]]\nname='a'\n[[nodes]]\nname='a'").is_err());
        assert!(Settings::from_toml("[[nodes]]\nname='a'\n[net]\nbogus_knob = 1").is_err());
        assert!(Settings::from_toml("[cluster]\ncoordinator='z'\n[[nodes]]\nname='a'").is_err());
        let two_on_one_port = "[[nodes]]\nname='a'\naddr='127.0.0.1:7000'\n[[nodes]]\nname='b'\naddr='127.0.0.1:7000'";
        let e = Settings::from_toml(two_on_one_port).unwrap_err();
        assert!(
            e.to_string().contains("both use address 127.0.0.1:7000"),
            "{e}"
        );
    }

    #[test]
    fn unknown_top_level_tables_are_refused_by_name() {
        let e = Settings::from_toml("[clustr]\nname = 'x'\n[[nodes]]\nname='a'").unwrap_err();
        let text = crate::error_chain(&e);
        assert!(text.contains("unknown table [clustr]"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, "[[nodes]]\nname='a'\n[nett]\nthreads = 2").unwrap();
        let e = Settings::load(&path).unwrap_err();
        let text = crate::error_chain(&e);
        assert!(text.contains("unknown table [nett]"), "{text}");
        assert!(text.contains("cluster.toml"), "{text}");
    }

    #[test]
    fn net_knobs_out_of_range_are_refused_naming_the_key() {
        for (knob, want) in [
            (
                "max_message_bytes = 0",
                "[net] max_message_bytes = 0: must be at least 1024",
            ),
            (
                "max_concurrent_streams = 0",
                "[net] max_concurrent_streams = 0: must be at least 1",
            ),
            (
                "receive_window = 0",
                "[net] receive_window = 0: must be at least 1024",
            ),
            (
                "threads = 100000",
                "[net] threads = 100000: must be at most",
            ),
        ] {
            let e = Settings::from_toml(&format!("[[nodes]]\nname='a'\n[net]\n{knob}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn certs_dir_is_relative_to_the_settings_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, "[cluster]\ncerts_dir = 'certs'\n[[nodes]]\nname='a'").unwrap();
        let s = Settings::load(&path).unwrap();
        assert_eq!(s.cluster.certs_dir, Some(dir.path().join("certs")));
    }

    #[test]
    fn node_names_are_validated() {
        for good in ["a", "w0", "shard-0", "node_7", "A1"] {
            validate_node_name(good).unwrap();
        }
        let long = "x".repeat(MAX_NODE_NAME_LEN + 1);
        for bad in [
            "",
            "../escaped",
            "a/b",
            ".hidden",
            "a.b",
            "-a",
            "a b",
            long.as_str(),
        ] {
            let e = validate_node_name(bad).unwrap_err();
            assert!(matches!(e, NodeError::InvalidNodeName { .. }), "{bad}: {e}");
        }
        let e = Settings::from_toml("[[nodes]]\nname='../x'").unwrap_err();
        assert!(e.to_string().contains("../x"), "{e}");
    }

    #[test]
    fn a_cluster_name_must_stay_one_path_component_and_errors_quote_only_a_names_start() {
        let e = Settings::from_toml("[cluster]\nname = 'x/../../elsewhere'\n[[nodes]]\nname='a'")
            .unwrap_err();
        assert!(e.to_string().contains("cluster.name"), "{e}");
        let huge = "y".repeat(1 << 20);
        let e = validate_node_name(&format!("{huge}/"))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "an error of {} bytes", e.len());
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        for (text, key) in [
            (
                "[cluster]\nheartbeat_ms = 5\n[[nodes]]\nname='a'",
                "heartbeat_ms",
            ),
            ("[[nodes]]\nname='a'\nrole = ['x']", "role"),
            ("[[nodes]]\nname='a'\n[net]\nbogus_knob = 1", "bogus_knob"),
        ] {
            let e = Settings::from_toml(text).unwrap_err();
            assert!(crate::error_chain(&e).contains(key), "{e}");
        }
        let e = Settings::from_toml("[cluster]\ntransport='tcp'\n[[nodes]]\nname='a'").unwrap_err();
        assert!(crate::error_chain(&e).contains("memory"), "{e}");
    }

    #[derive(clap::Args, Debug, PartialEq)]
    struct Knobs {
        #[arg(long, default_value_t = 7)]
        rounds: u32,
        #[arg(long, default_value = "fifo")]
        order: String,
        #[arg(long)]
        resume: bool,
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(skip = 0.5)]
        hidden: f64,
    }

    #[test]
    fn flag_defaults_are_the_flags_defaults() {
        let knobs: Knobs = super::flag_defaults();
        assert_eq!(
            knobs,
            Knobs {
                rounds: 7,
                order: "fifo".into(),
                resume: false,
                data: None,
                hidden: 0.5,
            }
        );
    }
}
