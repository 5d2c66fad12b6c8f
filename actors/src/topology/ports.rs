//! Free ports for nodes bound to port 0, checked before any node starts.

use super::*;

/// Replaces port 0 with free UDP ports for nodes of this process, held until bound.
pub fn reserve_ports(settings: &mut Settings) -> Result<(), NodeError> {
    assign_ports(settings, petrel_net::ports::reserve_held)
}

/// Replaces port 0 with free UDP ports for nodes that other processes will start.
pub fn pick_ports(settings: &mut Settings) -> Result<(), NodeError> {
    assign_ports(settings, petrel_net::ports::pick_free)
}

fn assign_ports(
    settings: &mut Settings,
    pick: impl Fn(std::net::IpAddr) -> std::io::Result<SocketAddr>,
) -> Result<(), NodeError> {
    let mut taken: Vec<SocketAddr> = settings
        .nodes
        .iter()
        .filter_map(|n| parse_addr(n).ok())
        .filter(|a| a.port() != 0)
        .collect();
    for n in &mut settings.nodes {
        let addr = parse_addr(n)?;
        if addr.port() == 0 {
            let picked = petrel_net::ports::pick_distinct(&taken, || pick(addr.ip()))?;
            taken.push(picked);
            n.addr = picked.to_string();
        }
    }
    Ok(())
}

/// Fails when a node's address cannot be bound now, naming the taken port at once.
pub(super) fn check_ports_free(settings: &Settings) -> Result<(), NodeError> {
    for n in &settings.nodes {
        let addr = parse_addr(n)?;
        if petrel_net::ports::is_held(addr) {
            continue;
        }
        if let Err(source) = std::net::UdpSocket::bind(addr) {
            return Err(NodeError::Bind {
                node: n.name.clone(),
                addr,
                source,
            });
        }
    }
    Ok(())
}
