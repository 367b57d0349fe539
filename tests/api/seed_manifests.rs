//! Seed 000's six manifests deserialize into our types without losing a field.

use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path = crate::support::repo_root()
        .join("tests/fixtures/seed000")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses the manifest into `T`, serializes it back and demands the same document: a field the
/// types did not know would be silently dropped by serde and show up here.
fn round_trip<T: DeserializeOwned + Serialize>(name: &str) -> T {
    let text = fixture(name);
    let raw: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name} is YAML: {e}"));
    let typed: T =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name} fits the type: {e}"));
    let mut back = serde_json::to_value(&typed).expect("serializable");
    let mut raw = raw;
    // One Rust type serves both versions (same schema), so it always writes the storage version.
    let version = raw["apiVersion"].take();
    assert!(
        [
            "infrastructure.cluster.x-k8s.io/v1alpha3",
            "infrastructure.cluster.x-k8s.io/v1alpha4"
        ]
        .contains(&version.as_str().unwrap_or_default()),
        "{name}: {version} is not a served version"
    );
    back["apiVersion"].take();
    assert_eq!(back, raw, "{name} lost or changed data in the round trip");
    typed
}

#[test]
fn metal_stack_cluster_manifests() {
    let initial: MetalStackCluster = round_trip("metalstackcluster-initial.yaml");
    assert_eq!(initial.spec.partition, "vagrant");
    assert_eq!(
        initial.spec.public_network_id.as_deref(),
        Some("internet-vagrant-lab")
    );
    let endpoint = initial
        .spec
        .control_plane_endpoint
        .clone()
        .expect("endpoint");
    assert_eq!(
        (endpoint.host.as_deref(), endpoint.port),
        (Some("100.255.254.1"), Some(6443))
    );
    let firewall = initial.spec.firewall_spec.as_ref().expect("firewallSpec");
    assert_eq!(
        firewall.provider_id.as_deref(),
        Some("metalstack://2294c949-88f6-5390-8154-fa53d93a3313")
    );
    let reconciled: MetalStackCluster = round_trip("metalstackcluster-reconciled.yaml");
    assert!(reconciled.status.expect("status").ready);
    assert_eq!(reconciled.spec, initial.spec);
}

#[test]
fn metal_stack_machine_manifests() {
    let initial: MetalStackMachine = round_trip("metalstackmachine-initial.yaml");
    assert_eq!(initial.spec.machine_type, "v1-small-x86");
    let reconciled: MetalStackMachine = round_trip("metalstackmachine-reconciled.yaml");
    let status = reconciled.status.expect("status");
    assert!(status.ready);
    assert_eq!(status.addresses.len(), 3);
    assert_eq!(status.addresses[0].address, "172.22.0.10");
}

#[test]
fn metal_stack_firewall_manifests() {
    let initial: MetalStackFirewall = round_trip("metalstackfirewall-initial.yaml");
    assert!(!initial.status.expect("status").ready);
    let reconciled: MetalStackFirewall = round_trip("metalstackfirewall-reconciled.yaml");
    assert!(reconciled.status.expect("status").ready);
}
