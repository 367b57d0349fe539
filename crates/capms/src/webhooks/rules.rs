//! Defaults and validation as pure functions: each returns every field error at once, worded
//! with the field path, what is wrong and what would be valid.

use crate::api::{
    ApiEndpoint, FirewallRules, MetalStackClusterSpec, MetalStackFirewallSpec,
    MetalStackMachineSpec, Protocol,
};
use ipnet::IpNet;
use metal_api::Catalog;
use metal_api::ProviderId;
use metal_api::images;
use metal_api::types::{FEATURE_FIREWALL, FEATURE_MACHINE};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects the errors and warnings of one admission.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

impl Report {
    pub(super) fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// `errors` joined into one message.
pub(crate) fn joined(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

// ---- defaults ---------------------------------------------------------------------------

fn default_rules(rules: &mut Option<FirewallRules>) {
    if let Some(rules) = rules {
        for r in &mut rules.egress {
            r.protocol.get_or_insert(Protocol::Tcp);
        }
        for r in &mut rules.ingress {
            r.protocol.get_or_insert(Protocol::Tcp);
        }
    }
}

/// Control-plane port 6443; firewall rule protocol tcp.
pub(crate) fn default_cluster(spec: &mut MetalStackClusterSpec) {
    let endpoint = spec
        .control_plane_endpoint
        .get_or_insert_with(ApiEndpoint::default);
    endpoint
        .port
        .get_or_insert(crate::api::common::DEFAULT_API_PORT);
    if let Some(fw) = &mut spec.firewall_spec {
        default_firewall(fw);
    }
}

/// A cluster written in the Go provider's `v1alpha1`: its API server listens where the Go
/// provider puts it, on port 443 of spec.controlPlaneIP, or of the IP capms allocates when
/// there is none (an endpoint of only a port, which `v1alpha1` shows once the host is known).
pub(crate) fn default_go_provider_cluster(spec: &mut MetalStackClusterSpec) {
    let endpoint = spec
        .control_plane_endpoint
        .get_or_insert_with(Default::default);
    if endpoint.host.is_none() {
        // The Go provider serves the API on port 443, of the given IP or of one it allocates.
        endpoint.host = spec.control_plane_ip.clone();
        endpoint.port = Some(endpoint.port.unwrap_or(crate::api::v1alpha1::API_PORT));
    }
}

pub(crate) fn default_firewall(spec: &mut MetalStackFirewallSpec) {
    default_rules(&mut spec.rules);
}

/// A machine's partition defaults to its cluster's.
pub(crate) fn default_machine(spec: &mut MetalStackMachineSpec, cluster_partition: Option<&str>) {
    if spec.partition.is_none() {
        spec.partition = cluster_partition.map(str::to_owned);
    }
}

// ---- validation -------------------------------------------------------------------------

mod cluster;
pub(crate) use cluster::{check_firewall_networks, validate_cluster};

fn check_partition(report: &mut Report, path: &str, partition: &str, catalog: &Catalog) {
    if !catalog.partitions.iter().any(|p| p.id == partition) {
        report.error(
            path,
            format!(
                "partition {partition:?} does not exist in metal-api; valid: {}",
                crate::choices(catalog.partitions.iter().map(|p| &p.id))
            ),
        );
    }
}

fn check_size(report: &mut Report, path: &str, size: &str, catalog: &Catalog) {
    if !catalog.sizes.iter().any(|s| s.id == size) {
        report.error(
            path,
            format!(
                "machine type {size:?} is not a metal-stack size; valid: {}",
                crate::choices(catalog.sizes.iter().map(|s| &s.id))
            ),
        );
    }
}

fn check_image(report: &mut Report, path: &str, image: &str, feature: &str, catalog: &Catalog) {
    let usable = catalog
        .images
        .iter()
        .filter(|i| i.has_feature(feature))
        .map(|i| &i.id);
    let valid = crate::choices(usable);
    match images::resolve(image, catalog.images.iter().map(|i| i.id.as_str())) {
        Err(_) => report.error(
            path,
            format!("image {image:?} does not resolve to any image in metal-api; valid {feature} images: {valid} (a shorter version such as <os>-<major>.<minor> resolves to the newest match)"),
        ),
        Ok(id) => {
            let resolved = catalog.images.iter().find(|i| i.id == id);
            if let Some(i) = resolved.filter(|i| !i.has_feature(feature)) {
                report.error(
                    path,
                    format!("image {image:?} resolves to {} which has features [{}], not {feature}; valid {feature} images: {valid}", i.id, i.features.join(", ")),
                );
            }
        }
    }
}

/// A providerID's form and target: the machine exists, lies in the partition, has the size and
/// is not allocated to someone else. `ours` are the owner tags of this object, if it exists.
fn check_provider_id(
    report: &mut Report,
    path: &str,
    provider_id: &str,
    partition: Option<&str>,
    size: &str,
    catalog: &Catalog,
    ours: Option<&BTreeMap<String, String>>,
) {
    let Ok(parsed) = ProviderId::parse(provider_id) else {
        report.error(
            path,
            format!(
                "{provider_id:?} is neither metalstack://<uuid> nor metal://<partition>/<uuid>"
            ),
        );
        return;
    };
    let Some(machine) = catalog.machines.iter().find(|m| m.id == parsed.machine_id) else {
        report.error(
            path,
            format!("machine {} does not exist in metal-api", parsed.machine_id),
        );
        return;
    };
    let machine_partition = machine
        .partition
        .as_ref()
        .map(|p| p.id.as_str())
        .unwrap_or_default();
    if let Some(p) = parsed
        .partition
        .as_deref()
        .filter(|p| *p != machine_partition)
    {
        report.error(
            path,
            format!(
                "names partition {p:?} but machine {} is in partition {machine_partition:?}",
                machine.id
            ),
        );
    }
    if let Some(p) = partition.filter(|p| *p != machine_partition) {
        report.error(
            path,
            format!(
                "machine {} is in partition {machine_partition:?}, not in {p:?}",
                machine.id
            ),
        );
    }
    let machine_size = machine
        .size
        .as_ref()
        .map(|s| s.id.as_str())
        .unwrap_or_default();
    if machine_size != size {
        report.error(
            path,
            format!(
                "machine {} has size {machine_size:?}, not the requested machine type {size:?}",
                machine.id
            ),
        );
    }
    if let Some(a) = &machine.allocation {
        let is_ours =
            ours.is_some_and(|marks| crate::ownership::has_owner_tags(&machine.tags, marks));
        if !is_ours {
            report.error(
                path,
                format!(
                    "machine {} is already allocated (to {:?} in project {})",
                    machine.id, a.name, a.project
                ),
            );
        }
    }
}

fn check_rules(report: &mut Report, path: &str, rules: &FirewallRules) {
    let mut check = |rule_path: String, cidrs: Vec<&String>| {
        let mut families = BTreeSet::new();
        for c in cidrs {
            match c.parse::<IpNet>() {
                Ok(cidr) => {
                    families.insert(cidr.addr().is_ipv4());
                }
                Err(e) => report.error(
                    &rule_path,
                    format!(
                        "{c:?} is not a CIDR ({e}); write CIDRs such as 10.0.0.0/8 or 2001:db8::/32"
                    ),
                ),
            }
        }
        if families.len() > 1 {
            report.error(
                &rule_path,
                "mixes IPv4 and IPv6 CIDRs; metal-api needs one address family per rule",
            );
        }
    };
    for (i, r) in rules.egress.iter().enumerate() {
        check(format!("{path}.egress[{i}].to"), r.to.iter().collect());
    }
    for (i, r) in rules.ingress.iter().enumerate() {
        check(
            format!("{path}.ingress[{i}]"),
            r.from.iter().chain(&r.to).collect(),
        );
    }
    // The schema says so too; said here, it comes with the object's other errors.
    let egress = rules
        .egress
        .iter()
        .enumerate()
        .map(|(i, r)| ("egress", i, &r.ports));
    let ingress = rules
        .ingress
        .iter()
        .enumerate()
        .map(|(i, r)| ("ingress", i, &r.ports));
    for (direction, i, ports) in egress.chain(ingress) {
        for (j, port) in ports.iter().enumerate() {
            if !(0..=65535).contains(port) {
                report.error(
                    format!("{path}.{direction}[{i}].ports[{j}]"),
                    format!("port {port} does not exist; valid: 0 to 65535"),
                );
            }
        }
    }
}

/// A MetalStackFirewall spec (also a cluster's firewallSpec), under `path`.
pub(crate) fn validate_firewall(
    report: &mut Report,
    path: &str,
    spec: &MetalStackFirewallSpec,
    old: Option<&MetalStackFirewallSpec>,
    partition: Option<&str>,
    catalog: Option<&Catalog>,
    ours: Option<&BTreeMap<String, String>>,
) {
    if let Some(rules) = &spec.rules {
        check_rules(report, &format!("{path}.rules"), rules);
    }
    if let Some(old) = old.filter(|o| o.provider_id.is_some()) {
        if old.provider_id != spec.provider_id {
            report.error(format!("{path}.providerID"), "is immutable once set");
        }
        if old.image != spec.image || old.machine_type != spec.machine_type {
            report.error(format!("{path}.image"), "image and machineType are immutable once the firewall is allocated; create a new firewall instead");
        }
    }
    let Some(catalog) = catalog else { return };
    check_image(
        report,
        &format!("{path}.image"),
        &spec.image,
        FEATURE_FIREWALL,
        catalog,
    );
    check_size(
        report,
        &format!("{path}.machineType"),
        &spec.machine_type,
        catalog,
    );
    for (i, n) in spec.networks.iter().enumerate() {
        if !catalog.networks.iter().any(|x| &x.id == n) {
            report.error(
                format!("{path}.networks[{i}]"),
                format!("network {n:?} does not exist in metal-api"),
            );
        }
    }
    if let Some(p) = spec
        .provider_id
        .as_deref()
        .filter(|_| old.is_none_or(|o| o.provider_id.is_none()))
    {
        check_provider_id(
            report,
            &format!("{path}.providerID"),
            p,
            partition,
            &spec.machine_type,
            catalog,
            ours,
        );
    }
}

/// A MetalStackMachine spec (also a template's), under `path`.
pub fn validate_machine(
    report: &mut Report,
    path: &str,
    spec: &MetalStackMachineSpec,
    old: Option<&MetalStackMachineSpec>,
    catalog: Option<&Catalog>,
    ours: Option<&BTreeMap<String, String>>,
) {
    let allocated = old.is_some_and(|o| o.provider_id.is_some());
    if let (true, Some(old)) = (allocated, old) {
        let fixed = [
            ("image", old.image != spec.image),
            ("machineType", old.machine_type != spec.machine_type),
            ("partition", old.partition != spec.partition),
            ("providerID", old.provider_id != spec.provider_id),
        ];
        for (field, changed) in fixed {
            if changed {
                report.error(format!("{path}.{field}"), "is immutable once the machine is allocated; create a new MetalStackMachine instead");
            }
        }
    }
    let Some(catalog) = catalog else { return };
    check_image(
        report,
        &format!("{path}.image"),
        &spec.image,
        FEATURE_MACHINE,
        catalog,
    );
    check_size(
        report,
        &format!("{path}.machineType"),
        &spec.machine_type,
        catalog,
    );
    if let Some(p) = &spec.partition {
        check_partition(report, &format!("{path}.partition"), p, catalog);
    }
    if let Some(p) = spec.provider_id.as_deref().filter(|_| !allocated) {
        check_provider_id(
            report,
            &format!("{path}.providerID"),
            p,
            spec.partition.as_deref(),
            &spec.machine_type,
            catalog,
            ours,
        );
    }
}

/// A MetalStackFirewallTemplate's firewall spec, under `path`: a firewall spec that names no
/// machine, since every firewall made from the template would claim it.
pub(crate) fn validate_firewall_template(
    report: &mut Report,
    path: &str,
    spec: &MetalStackFirewallSpec,
    catalog: Option<&Catalog>,
) {
    if spec.provider_id.is_some() {
        report.error(
            format!("{path}.providerID"),
            "a template cannot name a machine: every firewall made from it would claim the same one; remove providerID, or use a MetalStackCluster's firewallSpec for one firewall on that machine",
        );
    }
    validate_firewall(report, path, spec, None, None, catalog, None);
}

/// Templates are immutable, except for Cluster API's ClusterClass dry runs, which carry the
/// `topology.cluster.x-k8s.io/dry-run` annotation.
pub(crate) fn validate_template_update(
    report: &mut Report,
    old: &serde_json::Value,
    new: &serde_json::Value,
    dry_run_exempt: bool,
) {
    if !dry_run_exempt && old != new {
        report.error("spec.template", "templates are immutable; create a new template and point the MachineDeployment, Cluster or MetalStackCluster at it");
    }
}
