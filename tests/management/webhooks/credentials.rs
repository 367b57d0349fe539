//! Credentials per cluster at admission: the reference names a Secret of the cluster's own
//! namespace of the right shape, and a tenant's objects are judged by its own metal-api.

use super::{Admission, machine, write};
use crate::support::RunningSim;
use serde_json::{Value, json};

/// spec.credentialsRef names a Secret of the cluster's own namespace (kubectl refuses another
/// namespace there), newly named, it is refused when of the wrong shape and warned of when
/// missing; a cluster with credentials of its own is not judged by capms's own catalog.
pub(super) fn credentials_are_a_secret_of_the_namespace_of_the_right_shape(a: &Admission<'_>) {
    let cluster = |name: &str, partition: &str, reference: Value| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
               "metadata": {"name": name},
               "spec": {"partition": partition, "projectID": "00000000-0000-0000-0000-000000000001",
                        "credentialsRef": reference}})
    };
    a.refused(
        "credentials-elsewhere.json",
        cluster(
            "creds-elsewhere",
            "mini-lab",
            json!({"name": "team", "namespace": "other"}),
        ),
        &["unknown field \"spec.credentialsRef.namespace\""],
    );
    a.admitted(
        "credentials-secret.json",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "misshapen"},
               "stringData": {"url": "http://127.0.0.1:1/metal"}}),
    );
    a.refused(
        "credentials-misshapen.json",
        cluster("creds-misshapen", "mini-lab", json!({"name": "misshapen"})),
        &[
            "spec.credentialsRef.name: the credentials Secret",
            "neither `hmac` nor `token`",
        ],
    );
    let warnings = a.admitted(
        "credentials-missing.json",
        cluster(
            "creds-missing",
            "another-partition",
            json!({"name": "not-yet"}),
        ),
    );
    assert!(
        warnings.contains("/not-yet does not exist (yet)")
            && warnings.contains("checked when capms acts, not here"),
        "{warnings}"
    );
}

/// A cluster naming credentials, and its machines, are judged by the catalog of the metal-api
/// those credentials reach, never by capms's own: what only capms's own metal-api has is
/// refused naming the tenant's choices, what only the tenant's has is admitted unwarned, and so
/// is what the tenant's size image constraints refuse (read with its catalog, v1's `try` being
/// metal-api's admins' only). A newly named Secret whose key the tenant's metal-api refuses is
/// refused; one that goes bad later admits the cluster's machines with a warning naming the
/// Secret, never the key.
pub(super) fn a_tenant_is_judged_by_its_own_metal_api(a: &Admission<'_>, tenant: &RunningSim) {
    let tenant_url = &tenant.url;
    let secret = |name: &str, key: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
               "stringData": {"url": tenant_url, "hmac": key}})
    };
    a.admitted("tenant-secret.json", secret("tenant", "metal-edit"));
    a.admitted("refused-secret.json", secret("refused", "not-the-key"));
    let cluster = |name: &str, partition: &str, credentials: &str| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
               "metadata": {"name": name},
               "spec": {"partition": partition, "projectID": "00000000-0000-0000-0000-000000000000",
                        "credentialsRef": {"name": credentials}}})
    };
    a.wait_for_catalog_of("tenant-probe.json", cluster("probe", "vagrant", "tenant"));
    let warnings = a.admitted("tenant-a.json", cluster("tenant-a", "vagrant", "tenant"));
    assert!(!warnings.contains("Warning"), "{warnings}");
    a.refused(
        "tenant-b.json",
        cluster("tenant-b", "mini-lab", "tenant"),
        &["spec.partition: partition \"mini-lab\" does not exist in metal-api; valid: vagrant"],
    );
    a.cp.apply(&write(a.dir, "tenant-cluster.json", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "tenant-a", "namespace": a.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "tenant-a"}}})));
    let mut tenant_machine = machine(
        "tenant-machine",
        json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86"}),
    );
    tenant_machine["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "tenant-a"});
    a.refused(
        "tenant-machine.json",
        tenant_machine.clone(),
        &["spec.image", "ubuntu-20.04"],
    );
    tenant_machine["spec"]["image"] = json!("ubuntu-20.04");
    a.refused(
        "tenant-machine.json",
        tenant_machine.clone(),
        &[
            "spec.image: metal-api does not let machines of machine type \"v1-small-x86\" take image \"ubuntu-20.04\" (ubuntu-20.04.20201126)",
            "does violate image constraint:ubuntu >=22.04",
        ],
    );
    tenant_machine["spec"]["image"] = json!("ubuntu-cloud-init-20.04");
    let warnings = a.admitted("tenant-machine.json", tenant_machine);
    assert!(!warnings.contains("Warning"), "{warnings}");
    let asked = |route: &str| super::api_v2::asked(tenant, route);
    assert!(
        asked("/v1/size-image-constraint") >= 1,
        "read with the catalog"
    );
    assert_eq!(
        asked("/v1/size-image-constraint/try"),
        0,
        "never tried: v1's try is its admins' only"
    );
    // A newly named Secret whose key that metal-api refuses: refused at once.
    let origin = format!("Secret {}/refused", a.ns);
    let refusal = format!("Wrong HMAC found (the credentials of {origin})");
    a.refused(
        "tenant-c.json",
        cluster("tenant-c", "vagrant", "refused"),
        &[
            "spec.credentialsRef.name: metal-api refused the credentials",
            &refusal,
        ],
    );
    // A Secret that goes bad after its cluster named it: the cluster's machines are admitted
    // with a warning naming it, never the key.
    a.admitted("tenant-d.json", cluster("tenant-d", "vagrant", "later"));
    a.admitted("later-secret.json", secret("later", "not-the-key"));
    a.cp.apply(&write(a.dir, "tenant-d-cluster.json", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "tenant-d", "namespace": a.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "tenant-d"}}})));
    let mut late = machine(
        "late-machine",
        json!({"image": "ubuntu-20.04", "machineType": "v1-small-x86"}),
    );
    late["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "tenant-d"});
    let warnings = a.admitted("late-machine.json", late);
    let origin = format!("Secret {}/later", a.ns);
    assert!(
        warnings.contains(&format!("Wrong HMAC found (the credentials of {origin})"))
            && warnings.contains("were not checked")
            && !warnings.contains("not-the-key"),
        "{warnings}"
    );
}
