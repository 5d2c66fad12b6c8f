//! Cluster authentication: mutual TLS against a per-cluster certificate authority.
//!
//! `petrel certs` (or [`ClusterCa::generate`]) creates a CA whose key stays where it was
//! generated and issues one certificate per node. Both ends of every QUIC connection must
//! present a certificate of the cluster CA, so a process without one can neither connect
//! nor deliver a message.

use crate::config::{Congestion, NetConfig};
use crate::error::NetError;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The name every node certificate carries and every client checks.
pub const CLUSTER_SERVER_NAME: &str = "petrel.cluster";
/// The ALPN protocol id of petrel's QUIC connections.
pub const ALPN: &[u8] = b"petrel/1";

/// Longest node name: it is a DNS label in the node's certificate (`<name>.petrel.cluster`).
pub const MAX_NODE_NAME_LEN: usize = 63;

/// A node name outside the documented set (see [`check_node_name`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "invalid node name {name:?}: {why}; names are 1 to 63 characters from a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit"
)]
pub struct InvalidNodeName {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Checks a node name: 1 to [`MAX_NODE_NAME_LEN`] characters from `a-z A-Z 0-9 - _`,
/// starting with a letter or digit. Names become file names, certificate names and log
/// prefixes, so separators, dots and empty names are refused.
pub fn check_node_name(name: &str) -> Result<(), InvalidNodeName> {
    let bad = |why| {
        // A name can be anything a file or a flag held: quote only its start.
        let start = petrel_messages::clip(name, MAX_NODE_NAME_LEN + 1);
        let quoted = if start.len() < name.len() {
            format!("{start}…")
        } else {
            name.to_string()
        };
        Err(InvalidNodeName { name: quoted, why })
    };
    let Some(first) = name.chars().next() else {
        return bad("it is empty");
    };
    if name.len() > MAX_NODE_NAME_LEN {
        return bad("it is too long");
    }
    if !first.is_ascii_alphanumeric() {
        return bad("it must start with a letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return bad("it contains a character outside the allowed set");
    }
    Ok(())
}

/// The name in a node's certificate that binds it to its node name.
pub fn node_server_name(node_name: &str) -> String {
    format!("{node_name}.{CLUSTER_SERVER_NAME}")
}

/// The node names a certificate binds (`<name>.petrel.cluster` DNS names), if it parses.
pub fn node_names_in_certificate(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok(parsed) = webpki::EndEntityCert::try_from(cert) else {
        return Vec::new();
    };
    let suffix = format!(".{CLUSTER_SERVER_NAME}");
    parsed
        .valid_dns_names()
        .filter_map(|dns| dns.strip_suffix(suffix.as_str()))
        .filter(|name| check_node_name(name).is_ok())
        .map(str::to_string)
        .collect()
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> NetError + '_ {
    move |error| NetError::CertFile {
        path: path.to_path_buf(),
        error,
    }
}

/// A cluster's certificate authority.
pub struct ClusterCa {
    key: KeyPair,
    cert: rcgen::Certificate,
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "petrel cluster CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl ClusterCa {
    /// A fresh CA with a new key.
    pub fn generate() -> Result<Self, NetError> {
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        Ok(Self { key, cert })
    }

    /// Issues a node certificate for [`CLUSTER_SERVER_NAME`] naming `<node>.petrel.cluster`.
    pub fn issue(&self, node_name: &str) -> Result<ClusterCredentials, NetError> {
        check_node_name(node_name)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![
            CLUSTER_SERVER_NAME.to_string(),
            node_server_name(node_name),
        ])?;
        params
            .distinguished_name
            .push(DnType::CommonName, node_name);
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(ClusterCredentials {
            ca: self.cert.der().clone(),
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::try_from(key.serialize_der())
                .map_err(|e| NetError::TlsConfig(e.to_string()))?,
        })
    }

    /// Writes `ca.pem` and `ca.key` (0600, never replaced) into private `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), NetError> {
        crate::private_files::create_private_dir(dir).map_err(io_err(dir))?;
        write_file(&dir.join("ca.pem"), self.cert.pem().as_bytes(), false)?;
        write_file(
            &dir.join("ca.key"),
            self.key.serialize_pem().as_bytes(),
            true,
        )
    }

    /// Loads a CA written by [`ClusterCa::write`], to issue more node certificates.
    pub fn load(dir: &Path) -> Result<Self, NetError> {
        let path = dir.join("ca.key");
        let pem = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let key = KeyPair::from_pem(&pem).map_err(pem_err(&path))?;
        // Issuing only needs the CA's name and key; the re-created certificate has both.
        let cert = ca_params()?.self_signed(&key)?;
        Ok(Self { key, cert })
    }
}

fn write_file(path: &Path, data: &[u8], secret: bool) -> Result<(), NetError> {
    if secret {
        crate::private_files::write_secret(path, data)
    } else {
        crate::private_files::write_public(path, data)
    }
    .map_err(io_err(path))
}

/// What one node needs to join a cluster: the CA certificate, its chain and private key.
#[derive(Debug)]
pub struct ClusterCredentials {
    /// The cluster CA's certificate (every peer must chain to it).
    pub ca: CertificateDer<'static>,
    /// This node's certificate chain.
    pub chain: Vec<CertificateDer<'static>>,
    /// This node's private key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for ClusterCredentials {
    fn clone(&self) -> Self {
        Self {
            ca: self.ca.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

fn pem_err<E: std::fmt::Display>(path: &Path) -> impl FnOnce(E) -> NetError + '_ {
    move |e| NetError::Pem {
        path: path.to_path_buf(),
        error: e.to_string(),
    }
}

impl ClusterCredentials {
    /// Generates a throw-away CA and `n` node credentials (tests, single-process clusters).
    pub fn generate_cluster(names: &[&str]) -> Result<Vec<ClusterCredentials>, NetError> {
        let ca = ClusterCa::generate()?;
        names.iter().map(|n| ca.issue(n)).collect()
    }

    /// Writes `<name>.pem`, `<name>.key` (0600, never replaced) and `ca.pem` into private `dir`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<(), NetError> {
        check_node_name(name)?;
        crate::private_files::create_private_dir(dir).map_err(io_err(dir))?;
        let mut chain = String::new();
        for c in &self.chain {
            chain.push_str(&pem_encode("CERTIFICATE", c.as_ref()));
        }
        write_file(&dir.join(format!("{name}.pem")), chain.as_bytes(), false)?;
        write_file(
            &dir.join(format!("{name}.key")),
            pem_encode("PRIVATE KEY", self.key.secret_der()).as_bytes(),
            true,
        )?;
        write_file(
            &dir.join("ca.pem"),
            pem_encode("CERTIFICATE", self.ca.as_ref()).as_bytes(),
            false,
        )
    }

    /// Loads the credentials of node `name` from `dir` (as written by [`Self::write`]).
    pub fn load(dir: &Path, name: &str) -> Result<Self, NetError> {
        check_node_name(name)?;
        let ca_path = dir.join("ca.pem");
        let cert_path = dir.join(format!("{name}.pem"));
        let key_path = dir.join(format!("{name}.key"));
        let ca = CertificateDer::from_pem_file(&ca_path).map_err(pem_err(&ca_path))?;
        let chain = CertificateDer::pem_file_iter(&cert_path)
            .map_err(pem_err(&cert_path))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_err(&cert_path))?;
        if chain.is_empty() {
            return Err(pem_err(&cert_path)("no certificate"));
        }
        let key = PrivateKeyDer::from_pem_file(&key_path).map_err(pem_err(&key_path))?;
        Ok(Self { ca, chain, key })
    }

    /// Checks that the certificate is node `name`'s from the CA in [`Self::ca`].
    pub fn verify_node(&self, name: &str) -> Result<(), NetError> {
        let not_this = |reason: String| NetError::NotThisNode {
            path: PathBuf::from(format!("{name}.pem")),
            node: name.to_string(),
            reason,
        };
        let verifier = rustls::client::WebPkiServerVerifier::builder(self.roots()?)
            .build()
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        let server_name = rustls::pki_types::ServerName::try_from(node_server_name(name))
            .map_err(|e| not_this(e.to_string()))?;
        let (leaf, rest) = self
            .chain
            .split_first()
            .ok_or_else(|| not_this("no certificate".into()))?;
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            leaf,
            rest,
            &server_name,
            &[],
            rustls::pki_types::UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| not_this(e.to_string()))
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, NetError> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca.clone())
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        Ok(Arc::new(roots))
    }

    /// quinn server configuration: requires a client certificate from the cluster CA.
    pub fn server_config(&self, cfg: &NetConfig) -> Result<quinn::ServerConfig, NetError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder(self.roots()?)
            .build()
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        let mut tls = rustls::ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(Arc::new(transport_config(cfg)));
        // A connection stays at its admitted address (`identity::check_origin`).
        server.migration(false);
        Ok(server)
    }

    /// quinn client configuration: presents this node's certificate, trusts only the CA.
    pub fn client_config(&self, cfg: &NetConfig) -> Result<quinn::ClientConfig, NetError> {
        let mut tls = rustls::ClientConfig::builder()
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| NetError::TlsConfig(e.to_string()))?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        client.transport_config(Arc::new(transport_config(cfg)));
        Ok(client)
    }
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(label, der.to_vec()))
}

/// The QUIC transport knobs of [`NetConfig`], applied to both ends.
pub fn transport_config(cfg: &NetConfig) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let var = |v: u64| quinn::VarInt::from_u64(v).unwrap_or(quinn::VarInt::MAX);
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(cfg.max_concurrent_streams));
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(0));
    t.stream_receive_window(var(cfg.stream_receive_window));
    t.receive_window(var(cfg.receive_window));
    t.send_window(cfg.send_window);
    t.send_fairness(cfg.send_fairness);
    t.initial_mtu(cfg.initial_mtu.max(1200));
    t.min_mtu(1200);
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(cfg.udp_payload_bound());
    t.mtu_discovery_config(cfg.mtu_discovery.then_some(mtu));
    t.enable_segmentation_offload(cfg.segmentation_offload);
    if cfg.ack_eliciting_threshold > 0 || cfg.max_ack_delay_us > 0 {
        let mut ack = quinn::AckFrequencyConfig::default();
        if cfg.ack_eliciting_threshold > 0 {
            ack.ack_eliciting_threshold(quinn::VarInt::from_u32(cfg.ack_eliciting_threshold));
        }
        if cfg.max_ack_delay_us > 0 {
            ack.max_ack_delay(Some(Duration::from_micros(cfg.max_ack_delay_us)));
        }
        t.ack_frequency_config(Some(ack));
    }
    if cfg.keep_alive_ms > 0 {
        t.keep_alive_interval(Some(Duration::from_millis(cfg.keep_alive_ms)));
    }
    let idle = quinn::IdleTimeout::try_from(Duration::from_millis(cfg.idle_timeout_ms.max(1)));
    t.max_idle_timeout(idle.ok());
    t.congestion_controller_factory(congestion_controller(cfg));
    t
}

/// The congestion controller `cfg` names, starting from `cfg.initial_window` when set.
pub fn congestion_controller(
    cfg: &NetConfig,
) -> Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> {
    // The three configs share `initial_window` but no trait that has it.
    macro_rules! starting_at_the_window {
        ($config:ty) => {{
            let mut c = <$config>::default();
            if cfg.initial_window > 0 {
                c.initial_window(cfg.initial_window);
            }
            Arc::new(c)
        }};
    }
    match cfg.congestion {
        Congestion::Bbr => starting_at_the_window!(quinn::congestion::BbrConfig),
        Congestion::NewReno => starting_at_the_window!(quinn::congestion::NewRenoConfig),
        Congestion::Cubic => starting_at_the_window!(quinn::congestion::CubicConfig),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn credentials_round_trip_through_files() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::generate().unwrap();
        ca.write(dir.path()).unwrap();
        let creds = ca.issue("n1").unwrap();
        creds.write(dir.path(), "n1").unwrap();
        let back = ClusterCredentials::load(dir.path(), "n1").unwrap();
        assert_eq!(back.chain, creds.chain);
        assert_eq!(back.ca, creds.ca);
        // A reloaded CA still issues certificates that verify against the original CA cert.
        let ca2 = ClusterCa::load(dir.path()).unwrap();
        let more = ca2.issue("n2").unwrap();
        assert!(more.server_config(&NetConfig::default()).is_ok());
    }

    #[test]
    fn connections_start_with_the_configured_window_and_ask_for_prompt_acks() {
        let start = |cfg: &NetConfig| {
            congestion_controller(cfg)
                .build(std::time::Instant::now(), 1452)
                .window()
        };
        let quic_default = start(&NetConfig::default());
        assert_eq!(quic_default, 12_000);
        let lo = NetConfig::default().for_peer(SocketAddr::from(([127, 0, 0, 1], 9000)));
        for congestion in [Congestion::Cubic, Congestion::NewReno, Congestion::Bbr] {
            let cfg = NetConfig {
                congestion,
                ..lo.clone()
            };
            assert_eq!(start(&cfg), 1 << 20, "{congestion}");
        }
        let lan = NetConfig::default().for_peer(SocketAddr::from(([10, 0, 0, 7], 9000)));
        assert_eq!(start(&lan), quic_default);
        let shown = format!("{:?}", transport_config(&NetConfig::default()));
        assert!(shown.contains("max_ack_delay: Some(1ms)"), "{shown}");
        let peers_own = NetConfig {
            max_ack_delay_us: 0,
            ..NetConfig::default()
        };
        let shown = format!("{:?}", transport_config(&peers_own));
        assert!(shown.contains("ack_frequency_config: None"), "{shown}");
    }

    #[test]
    fn a_certificate_names_its_node_and_its_ca() {
        let ca = ClusterCa::generate().unwrap();
        let a = ca.issue("a").unwrap();
        a.verify_node("a").unwrap();
        let e = a.verify_node("b").unwrap_err().to_string();
        assert!(e.contains("not a certificate of node b"), "{e}");
        // The same node name from another cluster's CA.
        let mut foreign = ClusterCa::generate().unwrap().issue("a").unwrap();
        foreign.ca = a.ca.clone();
        assert!(foreign.verify_node("a").is_err());
    }

    #[test]
    fn a_certificate_yields_exactly_its_node_name() {
        let ca = ClusterCa::generate().unwrap();
        let a = ca.issue("worker-1").unwrap();
        assert_eq!(node_names_in_certificate(&a.chain[0]), vec!["worker-1"]);
        // The CA certificate names no node; garbage parses to nothing.
        assert!(node_names_in_certificate(&a.ca).is_empty());
        assert!(
            node_names_in_certificate(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).is_empty()
        );
    }

    #[test]
    fn bad_node_names_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::generate().unwrap();
        for bad in ["../escaped", "", ".hidden", "a/b"] {
            assert!(matches!(ca.issue(bad), Err(NetError::NodeName(_))), "{bad}");
            let creds = ca.issue("ok").unwrap();
            assert!(creds.write(dir.path(), bad).is_err(), "{bad}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn missing_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ClusterCredentials::load(dir.path(), "nope").is_err());
    }
}
