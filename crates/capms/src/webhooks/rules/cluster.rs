//! MetalStackCluster specs: fixed fields, the project, and the public and private networks by
//! metal-api's network rules.

use super::{Report, check_partition, validate_firewall};
use crate::api::MetalStackClusterSpec;
use crate::networks;
use metal_api::Catalog;
use std::net::IpAddr;

/// A MetalStackCluster spec (also a template's), under `path`.
pub(crate) fn validate_cluster(
    report: &mut Report,
    path: &str,
    spec: &MetalStackClusterSpec,
    old: Option<&MetalStackClusterSpec>,
    catalog: Option<&Catalog>,
) {
    if let Some(old) = old {
        check_cluster_update(report, path, spec, old);
    }
    let firewalls = [
        spec.firewall_spec.is_some(),
        spec.firewall_template_ref.is_some(),
        spec.firewall_deployment_ref.is_some(),
    ];
    if firewalls.into_iter().filter(|set| *set).count() > 1 {
        report.error(
            format!("{path}.firewallTemplateRef"),
            "set at most one of firewallSpec (the firewall inline), firewallTemplateRef (a MetalStackFirewallTemplate) and firewallDeploymentRef (a MetalStackFirewallDeployment)",
        );
    }
    if let Some(fw) = &spec.firewall_spec {
        validate_firewall(
            report,
            &format!("{path}.firewallSpec"),
            fw,
            old.and_then(|o| o.firewall_spec.as_ref()),
            Some(&spec.partition),
            catalog,
            None,
        );
    }
    let Some(catalog) = catalog else { return };
    check_partition(
        report,
        &format!("{path}.partition"),
        &spec.partition,
        catalog,
    );
    if !catalog
        .projects
        .iter()
        .any(|p| p.meta.id == spec.project_id)
    {
        report.error(
            format!("{path}.projectID"),
            format!(
                "project {:?} does not exist in metal-api; valid: {}",
                spec.project_id,
                crate::choices(
                    catalog
                        .projects
                        .iter()
                        .map(|p| format!("{} ({})", p.meta.id, p.name))
                )
            ),
        );
    }
    check_public_network(report, path, spec, catalog);
    check_private_network(report, path, spec, catalog);
    if let Some(fw) = &spec.firewall_spec {
        let networks = format!("{path}.firewallSpec.networks");
        let own = spec.private_network_id.as_deref();
        check_firewall_networks(report, &networks, &fw.networks, (spec, own), "", catalog);
    }
}

/// A firewall's networks against the cluster it serves (its spec and, when known, its own
/// private network), network by network (`networks::unfit_for_firewall`). `whose` ends each
/// message, naming the cluster when the networks are a template's.
pub(crate) fn check_firewall_networks(
    report: &mut Report,
    path: &str,
    networks: &[String],
    (cluster, own): (&MetalStackClusterSpec, Option<&str>),
    whose: &str,
    catalog: &Catalog,
) {
    let (project, partition) = (&cluster.project_id, &cluster.partition);
    for (i, id) in networks.iter().enumerate() {
        let Some(n) = catalog.networks.iter().find(|n| &n.id == id) else {
            continue;
        };
        if let Some(problem) = networks::unfit_for_firewall(n, project, partition, own) {
            report.error(
                format!("{path}[{i}]"),
                format!(
                    "{problem}{whose}; {}",
                    networks::firewall_choices(&catalog.networks, partition)
                ),
            );
        }
    }
}

/// Fields that are fixed once set.
fn check_cluster_update(
    report: &mut Report,
    path: &str,
    spec: &MetalStackClusterSpec,
    old: &MetalStackClusterSpec,
) {
    let (o, n) = (
        old.control_plane_endpoint.clone().unwrap_or_default(),
        spec.control_plane_endpoint.clone().unwrap_or_default(),
    );
    let fixed = [
        ("partition", old.partition != spec.partition),
        ("projectID", old.project_id != spec.project_id),
        (
            "publicNetworkID",
            old.public_network_id != spec.public_network_id,
        ),
        (
            "privateNetworkID",
            old.private_network_id.is_some() && old.private_network_id != spec.private_network_id,
        ),
        (
            "controlPlaneEndpoint.host",
            o.host.is_some() && o.host != n.host,
        ),
        (
            "controlPlaneEndpoint.port",
            o.port.is_some() && o.port != n.port,
        ),
    ];
    for (field, changed) in fixed {
        if changed {
            report.error(format!("{path}.{field}"), "is immutable once set");
        }
    }
}

/// spec.publicNetworkID names an external network, and a given control-plane host lies in it.
fn check_public_network(
    report: &mut Report,
    path: &str,
    spec: &MetalStackClusterSpec,
    catalog: &Catalog,
) {
    let field = format!("{path}.publicNetworkID");
    let Some(id) = &spec.public_network_id else {
        // Without a public network of its own the cluster needs metal-api's default one, but
        // only to allocate its control-plane IP.
        let host = spec
            .control_plane_endpoint
            .as_ref()
            .and_then(|e| e.host.as_ref());
        let needed = host.is_none() && spec.control_plane_ip.is_none();
        if let (true, Err(missing)) = (needed, networks::default_external(&catalog.networks)) {
            report.error(field, missing.to_string());
        }
        return;
    };
    let choices = || networks::external_choices(&catalog.networks);
    let n = match catalog.networks.iter().find(|n| &n.id == id) {
        None => return report.error(field, networks::missing(id, &choices())),
        Some(n) if !networks::is_external(n) => {
            let it = if n.underlay { "an underlay" } else { "private" };
            let message = format!(
                "network {id:?} is not an external network (it is {it}); {}",
                choices()
            );
            return report.error(field, message);
        }
        Some(n) => n,
    };
    let Some(host) = spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref())
    else {
        return;
    };
    match host.parse::<IpAddr>() {
        Ok(ip) if !networks::contains(n, ip) => report.error(
            format!("{path}.controlPlaneEndpoint.host"),
            format!("{host} is not in the public network {:?} (prefixes {}); use an address of it, or leave host empty to have capms allocate one", n.id, n.prefixes.join(", ")),
        ),
        Ok(_) => {}
        Err(_) => report.warnings.push(format!("{path}.controlPlaneEndpoint.host {host:?} is a name, not an IP; capms cannot reserve it in metal-api")),
    }
}

/// spec.privateNetworkID, when given, names a private network of the cluster's project and
/// partition.
fn check_private_network(
    report: &mut Report,
    path: &str,
    spec: &MetalStackClusterSpec,
    catalog: &Catalog,
) {
    let Some(id) = &spec.private_network_id else {
        return;
    };
    let field = format!("{path}.privateNetworkID");
    let choices = networks::private_choices(&catalog.networks, &spec.project_id, &spec.partition);
    match catalog.networks.iter().find(|n| &n.id == id) {
        None => report.error(field, networks::missing(id, &choices)),
        Some(n) if n.parentnetworkid.is_none() => report.error(
            field,
            format!("network {id:?} is not a private network; {choices}"),
        ),
        Some(n) if !networks::is_private_of(n, &spec.project_id, &spec.partition) => report.error(
            field,
            format!(
                "network {id:?} belongs to project {:?} in partition {:?}; {choices}",
                n.projectid, n.partitionid
            ),
        ),
        Some(_) => {}
    }
}
