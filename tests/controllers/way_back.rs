//! The way back to metal-stack's Go provider, as far as it goes here: after capms took a
//! cluster over, the steps of the migration guide (docs/migrating-from-the-go-provider.md) bring
//! back the Go provider's CRDs with every
//! object stored as `v1alpha1` and everything the Go provider reads to find its allocations
//! again. The Go provider itself cannot run here: the Go module proxy refuses it
//! (`github.com/metal-stack/cluster-api-provider-metal-stack@v0.8.0: reading
//! https://proxy.golang.org/…/@v/v0.8.0.info: 403 Forbidden`), so the test stops at what it
//! would read.

use super::switch_over::{CLUSTER, GO, Replacement, WORKER, taken_over};
use super::*;

/// The kinds capms converts: plural and kind.
const CONVERTED: [(&str, &str); 4] = [
    ("metalstackclusters", "MetalStackCluster"),
    ("metalstackmachines", "MetalStackMachine"),
    ("metalstackmachinetemplates", "MetalStackMachineTemplate"),
    ("metalstackfirewalltemplates", "MetalStackFirewallTemplate"),
];

#[tokio::test(flavor = "current_thread")]
async fn the_way_back_leaves_what_the_go_provider_reads() {
    let cp = ControlPlane::go_provider_management("way-back");
    let (mut env, allocated) = taken_over(&cp, "way-back", Replacement::PlainApply).await;
    // 1. The Cluster is paused: capms, still running, touches nothing of it.
    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .expect("pause the Cluster");
    // Seen before the firewall goes (step 4): a reconcile of the firewall by a capms that had
    // not seen it could put its finalizer back, and the deletion would then free the firewall's
    // machine (as happened to a MetalStackMachine in `orphans`).
    env.paused_seen_on(CLUSTER, true).await;
    // 2. v1alpha1 becomes the storage version.
    for (plural, _) in CONVERTED {
        let crd = format!("{plural}.infrastructure.cluster.x-k8s.io");
        let patch = r#"[{"op":"replace","path":"/spec/versions/0/storage","value":true},{"op":"replace","path":"/spec/versions/2/storage","value":false}]"#;
        cp.kubectl(&["patch", "crd", &crd, "--type=json", "-p", patch], &[]);
    }
    // 3. Every object is written again, so that it is stored as v1alpha1; then only v1alpha1 is
    //    a stored version.
    for (plural, kind) in CONVERTED {
        let api = env.dynamic(GO, kind, plural);
        for object in api.list(&Default::default()).await.expect("list").items {
            let name = object.metadata.name.clone().expect("name");
            api.replace(&name, &Default::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("rewriting {kind} {name}: {e}"));
        }
        let crd = format!("{plural}.infrastructure.cluster.x-k8s.io");
        let patch = r#"{"status":{"storedVersions":["v1alpha1"]}}"#;
        cp.kubectl(
            &[
                "patch",
                "crd",
                &crd,
                "--subresource=status",
                "--type=merge",
                "-p",
                patch,
            ],
            &[],
        );
    }
    // 4. The MetalStackFirewall goes without freeing its machine.
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let firewall = format!("{CLUSTER}-firewall");
    firewalls
        .patch(
            &firewall,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("finalizer removed");
    let _ = firewalls.delete(&firewall, &DeleteParams::default()).await;
    // 5. capms stops, and the Go provider's CRDs replace capms's, with the contract labels its
    //    kustomization adds.
    env.capms = None;
    cp.install_go_provider_crds();
    for (plural, _) in CONVERTED {
        let crd = format!("{plural}.infrastructure.cluster.x-k8s.io");
        let versions = cp.kubectl(
            &[
                "get",
                "crd",
                &crd,
                "-o",
                "jsonpath={.spec.versions[*].name} {.spec.conversion.strategy}",
            ],
            &[],
        );
        assert_eq!(
            versions, "v1alpha1 None",
            "{crd} is the Go provider's again"
        );
    }

    what_the_go_provider_reads_is_there(&env, &allocated).await;
    let (_, _, machines) = env.allocations().await;
    assert!(
        machines.contains(&allocated.firewall) && machines.contains(&allocated.machine),
        "firewall and worker stay allocated: {machines:?}"
    );
}

/// Under the Go provider's CRDs (one version, no conversion): the write-backs it finds its
/// allocations by (section 2.7 of the reference) and the status it wrote.
async fn what_the_go_provider_reads_is_there(env: &Env, allocated: &super::switch_over::Allocated) {
    let get = |kind: &'static str, name: &'static str| async move {
        let plural = format!("{}s", kind.to_lowercase());
        let object = env.dynamic(GO, kind, &plural).get(name).await;
        object.unwrap_or_else(|e| panic!("{kind} {name} under the Go provider's CRDs: {e}"))
    };
    let cluster = get("MetalStackCluster", CLUSTER).await;
    assert_eq!(
        cluster.data["spec"]["nodeNetworkID"],
        allocated.network.as_str()
    );
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"],
        json!({"host": allocated.ip, "port": 443})
    );
    assert_eq!(
        cluster.data["spec"]["controlPlaneIP"],
        allocated.ip.as_str()
    );
    assert_eq!(cluster.data["status"]["ready"], true);
    let machine = get("MetalStackMachine", WORKER).await;
    assert_eq!(
        machine.data["spec"]["providerID"],
        format!("metal://mini-lab/{}", allocated.machine)
    );
    let deployment = get("MetalStackFirewallDeployment", CLUSTER).await;
    assert_eq!(
        deployment.data["spec"]["managedResourceRef"]["name"],
        format!("metal://mini-lab/{}", allocated.firewall)
    );
    let template = get("MetalStackFirewallTemplate", CLUSTER).await;
    assert_eq!(template.data["spec"]["size"], "v1-small-x86");
    assert_eq!(
        template.data["spec"]["initialRuleSet"]["egress"][0]["protocol"],
        "TCP"
    );
}
