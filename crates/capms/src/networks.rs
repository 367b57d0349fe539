//! metal-api's network rules as capms applies them, in one place for the webhooks and the
//! controllers: which networks can serve as a cluster's public or private network, and the
//! messages that name the valid choices.

use ipnet::IpNet;
use metal_api::types::Network;
use std::net::IpAddr;

/// An external network: no parent, neither a private super network nor an underlay.
pub(crate) fn is_external(n: &Network) -> bool {
    n.parentnetworkid.is_none() && !n.privatesuper && !n.underlay
}

/// A private network (a child of a private super network) of `project` in `partition`.
pub(crate) fn is_private_of(n: &Network, project: &str, partition: &str) -> bool {
    n.parentnetworkid.is_some() && n.projectid == project && n.partitionid == partition
}

/// Does one of the network's prefixes hold `address`?
pub fn contains(n: &Network, address: IpAddr) -> bool {
    n.prefixes
        .iter()
        .filter_map(|p| p.parse::<IpNet>().ok())
        .any(|p| p.contains(&address))
}

/// "valid external networks: …"
pub(crate) fn external_choices<'a>(all: impl IntoIterator<Item = &'a Network>) -> String {
    let ids = all.into_iter().filter(|n| is_external(n)).map(|n| &n.id);
    format!("valid external networks: {}", crate::choices(ids))
}

/// "valid private networks of the project: …"
pub(crate) fn private_choices<'a>(
    all: impl IntoIterator<Item = &'a Network>,
    project: &str,
    partition: &str,
) -> String {
    let ids = all
        .into_iter()
        .filter(|n| is_private_of(n, project, partition))
        .map(|n| &n.id);
    format!(
        "valid private networks of the project: {}",
        crate::choices(ids)
    )
}

/// Why a cluster that names no public network has no default one to take.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoDefaultExternal {
    #[error(
        "is not set and no external network carries the label {key}; name one here (v1alpha4) or give spec.controlPlaneIP; {choices}",
        key = metal_api::tags::NETWORK_DEFAULT
    )]
    None { choices: String },
    #[error(
        "is not set and several external networks carry the label {key}; name one here (v1alpha4) or give spec.controlPlaneIP; {choices}",
        key = metal_api::tags::NETWORK_DEFAULT
    )]
    Several { choices: String },
}

/// The public network of a cluster that names none: the one external network metal-api labels
/// `network.metal-stack.io/default`; the error names what is wrong and the valid choices.
pub(crate) fn default_external(all: &[Network]) -> Result<&Network, NoDefaultExternal> {
    let key = metal_api::tags::NETWORK_DEFAULT;
    let mut defaults = all
        .iter()
        .filter(|n| is_external(n) && n.labels.contains_key(key));
    let choices = || external_choices(all);
    match (defaults.next(), defaults.next()) {
        (Some(n), None) => Ok(n),
        (None, _) => Err(NoDefaultExternal::None { choices: choices() }),
        (Some(_), Some(_)) => Err(NoDefaultExternal::Several { choices: choices() }),
    }
}

/// Why a firewall of a cluster in `project` and `partition`, whose own private network is `own`
/// (when known), cannot be placed into `n` besides that one: capms adds the cluster's own
/// private network itself, and metal-api places a machine into at most one private network that
/// is not shared. None when it can.
pub(crate) fn unfit_for_firewall(
    n: &Network,
    project: &str,
    partition: &str,
    own: Option<&str>,
) -> Option<String> {
    if n.underlay {
        return Some(format!(
            "network {:?} is an underlay network, which metal-api adds to every firewall itself",
            n.id
        ));
    }
    if n.privatesuper {
        return Some(format!(
            "network {:?} is a private super network, which no machine is placed into",
            n.id
        ));
    }
    // External networks fit every cluster.
    n.parentnetworkid.as_ref()?;
    if n.partitionid != partition {
        return Some(format!(
            "network {:?} is a private network in partition {:?}, not in the cluster's partition {partition:?}",
            n.id, n.partitionid
        ));
    }
    if n.shared {
        return None;
    }
    if n.projectid != project {
        return Some(format!(
            "network {:?} is a private network of project {:?}, not of the cluster's project {project:?}",
            n.id, n.projectid
        ));
    }
    (own != Some(n.id.as_str())).then(|| {
        format!(
            "network {:?} is a private network of the project but not the cluster's own, which capms adds to the firewall itself; metal-api places a machine into one private network that is not shared",
            n.id
        )
    })
}

/// "valid: …" for a firewall's networks: the external networks and the shared private networks
/// of `partition`.
pub(crate) fn firewall_choices(all: &[Network], partition: &str) -> String {
    let shared = all
        .iter()
        .filter(|n| n.parentnetworkid.is_some() && n.shared && n.partitionid == partition)
        .map(|n| &n.id);
    format!(
        "{}; valid shared private networks: {} (capms adds the cluster's own private network itself)",
        external_choices(all),
        crate::choices(shared)
    )
}

/// The message for a network id metal-api does not know, with the valid choices.
pub fn missing(id: &str, choices: &str) -> String {
    format!("network {id:?} does not exist in metal-api; {choices}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(id: &str, parent: Option<&str>, project: &str) -> Network {
        Network {
            id: id.into(),
            parentnetworkid: parent.map(str::to_owned),
            projectid: project.into(),
            partitionid: "fra".into(),
            prefixes: vec!["127.100.0.0/24".into()],
            ..Default::default()
        }
    }

    #[test]
    fn choices_name_only_the_networks_that_fit() {
        let all = [
            network("internet", None, ""),
            network("tenant-super", None, ""),
            network("p1-net", Some("tenant-super"), "p1"),
            network("p2-net", Some("tenant-super"), "p2"),
        ];
        let mut underlay = network("underlay", None, "");
        underlay.underlay = true;
        let mut all = all.to_vec();
        all[1].privatesuper = true;
        all.push(underlay);
        assert_eq!(external_choices(&all), "valid external networks: internet");
        assert_eq!(
            private_choices(&all, "p1", "fra"),
            "valid private networks of the project: p1-net"
        );
        assert_eq!(
            missing("x", &private_choices(&all, "p3", "fra")),
            "network \"x\" does not exist in metal-api; valid private networks of the project: none"
        );
        assert!(contains(&all[0], "127.100.0.9".parse().expect("ip")));
        assert!(!contains(&all[0], "127.101.0.9".parse().expect("ip")));
    }
}
