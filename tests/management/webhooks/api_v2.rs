//! A tenant on metal-apiserver (API v2) at admission: besides the catalog's checks, its
//! machines' size and image are put to metal-apiserver (`SizeImageConstraintService/Try`), so
//! that a pair its size image constraints refuse is refused at `kubectl apply`, naming the field
//! and the constraint; one verdict serves every object of the same pair for a while.

use super::{Admission, machine, write};
use crate::support::RunningSim;
use metal_sim::inventory::{Inventory, SizeImageConstraintSpec};
use serde_json::{Value, json};

/// The project of seed 000's inventory.
pub(super) const PROJECT: &str = "00000000-0000-0000-0000-000000000000";
/// A project whose tokens see nothing of `PROJECT`.
pub(super) const OTHER_PROJECT: &str = "00000000-0000-0000-0000-000000000002";
const TRY: &str = "/metalstack.api.v2.SizeImageConstraintService/Try";

/// Seed 000's inventory whose size takes no Ubuntu before 22.04 (Ubuntu with cloud-init is
/// another OS, and allowed).
pub(super) fn constrained_inventory() -> Inventory {
    let mut inventory = Inventory::seed000();
    inventory
        .sizeimageconstraints
        .push(SizeImageConstraintSpec {
            id: "v1-small-x86".into(),
            images: [("ubuntu".to_owned(), ">= 22.04".to_owned())].into(),
        });
    inventory
}

fn of_cluster(mut object: Value, cluster: &str) -> Value {
    object["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": cluster});
    object
}

/// How often the simulator was asked `route` (a v1 route's template or a v2 procedure).
pub(super) fn asked(sim: &RunningSim, route: &str) -> u64 {
    let report = sim.sim.stats().report();
    let asked = report.requests.iter().filter(|r| r.route == route);
    asked.map(|r| r.count).sum()
}

fn tries(sim: &RunningSim) -> u64 {
    asked(sim, TRY)
}

fn secret(name: &str, sim: &RunningSim, token: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "stringData": sim.v2_credentials(token, PROJECT)})
}

fn cluster(name: &str, secret: &str) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
        "metadata": {"name": name},
        "spec": {"partition": "vagrant", "projectID": PROJECT, "credentialsRef": {"name": secret}}})
}

/// A second tenant of the same metal-apiserver and project: its catalog proves with its own
/// token that it is of the project, and shares the partitions, sizes and images, and the
/// project's networks and machines, that the first tenant's catalog read. A token of another
/// project is refused, and never handed what the first token read.
fn a_second_tenant_shares_what_it_may_see(a: &Admission<'_>, sim: &RunningSim, tokens: [&str; 2]) {
    const SHARED: [&str; 6] = [
        "/metalstack.api.v2.PartitionService/List",
        "/metalstack.api.v2.SizeService/List",
        "/metalstack.api.v2.ImageService/List",
        "/metalstack.api.v2.NetworkService/List",
        "/metalstack.api.v2.NetworkService/ListBaseNetworks",
        "/metalstack.api.v2.MachineService/List",
    ];
    const OWN: &str = "/metalstack.api.v2.ProjectService/Get";
    let shared = || SHARED.map(|p| asked(sim, p));
    let (shared_before, own_before) = (shared(), asked(sim, OWN));
    assert_eq!(
        shared_before, [1; 6],
        "the first tenant's catalog read them"
    );
    a.admitted("v2-secret-b.json", secret("v2-tenant-b", sim, tokens[0]));
    a.wait_for_catalog_of("v2-probe-b.json", cluster("v2-b", "v2-tenant-b"));
    assert!(asked(sim, OWN) > own_before, "proved with the second token");
    assert_eq!(shared(), shared_before, "read once for both tenants");

    a.admitted("v2-secret-c.json", secret("v2-tenant-c", sim, tokens[1]));
    let refused = |ok: bool, stderr: &str| {
        !ok && stderr.contains("metal-api refused the credentials")
            && stderr.contains("v2-tenant-c")
    };
    let probe = cluster("v2-c", "v2-tenant-c");
    a.wait_for_dry_run(
        "v2-probe-c.json",
        probe,
        "the foreign token refused",
        refused,
    );
}

pub(super) fn a_tenant_on_api_v2_is_refused_what_metal_apiserver_refuses(
    a: &Admission<'_>,
    sim: &RunningSim,
    tokens: [&str; 3],
) {
    a.admitted("v2-secret.json", secret("v2-tenant", sim, tokens[0]));
    let cluster = cluster("v2-a", "v2-tenant");
    a.wait_for_catalog_of("v2-probe.json", cluster.clone());
    a_second_tenant_shares_what_it_may_see(a, sim, [tokens[1], tokens[2]]);
    a.admitted("v2-cluster.json", cluster);
    a.cp.apply(&write(a.dir, "v2-capi-cluster.json", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "v2-a", "namespace": a.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "v2-a"}}})));

    let before = tries(sim);
    let spec = |image: &str| json!({"image": image, "machineType": "v1-small-x86"});
    let template = |name: &str, image: &str| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
               "metadata": {"name": name}, "spec": {"template": {"spec": spec(image)}}})
    };
    let violation = "does violate image constraint:ubuntu >=22.04";
    a.refused(
        "v2-template.json",
        of_cluster(template("v2-old-ubuntu", "ubuntu-20.04"), "v2-a"),
        &[
            "spec.template.spec.image: metal-api does not let machines of machine type \"v1-small-x86\" take image \"ubuntu-20.04\" (ubuntu-20.04.20201126)",
            violation,
        ],
    );
    // The template's verdict is kept: machines of the same pair cost no further call.
    for name in ["v2-old-1", "v2-old-2"] {
        a.refused(
            &format!("{name}.json"),
            of_cluster(machine(name, spec("ubuntu-20.04")), "v2-a"),
            &["spec.image: metal-api does not let machines", violation],
        );
    }
    assert_eq!(tries(sim), before + 1, "one Try for one pair");

    let warnings = a.admitted(
        "v2-cloud-init.json",
        of_cluster(
            machine("v2-cloud-init", spec("ubuntu-cloud-init-20.04")),
            "v2-a",
        ),
    );
    assert!(!warnings.contains("Warning"), "{warnings}");
    assert_eq!(tries(sim), before + 2, "one Try for the other pair");
}
