//! The crash points' second cluster, as metal-stack's Go provider's users write it.

use super::*;

pub(super) const GO: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
pub(super) const GO_CLUSTER: &str = "go-cluster";
/// A size of the lab without machines.
pub(super) const GO_FIREWALL_WAITING_SIZE: &str = "v1-medium-x86";

/// A cluster as the Go provider's users write it (`v1alpha1`): an API server on a host to
/// reserve, a firewall deployment made from a template. Its firewall first waits for a machine of its
/// size, then its template changes to a size there is (the firewall, not yet allocated, is
/// updated in place).
pub(super) async fn go_provider_cluster(env: &Env, lives: &mut Lives) {
    let template = |size: &str| {
        json!({"apiVersion": GO, "kind": "MetalStackFirewallTemplate", "metadata": {"name": "go-firewall"},
            "spec": {"image": "firewall-ubuntu-3.0", "size": size, "networks": ["internet-mini-lab"],
                "partition": "mini-lab", "project": "00000000-0000-0000-0000-000000000001",
                "initialRuleSet": {"egress": [{"ports": [443], "protocol": "TCP", "to": ["0.0.0.0/0"]}]}}})
    };
    env.apply(template(GO_FIREWALL_WAITING_SIZE)).await;
    // As the Go provider left it: with its finalizer, which capms removes on deletion.
    let finalizer = capms::controllers::firewall_deployment::FINALIZER;
    env.apply(
        json!({"apiVersion": GO, "kind": "MetalStackFirewallDeployment",
        "metadata": {"name": "go-firewall", "finalizers": [finalizer]},
        "spec": {"firewallTemplateRef": {"name": "go-firewall"}}}),
    )
    .await;
    // An endpoint host metal-api has no IP for: capms reserves it.
    let msc = json!({"apiVersion": GO, "kind": "MetalStackCluster", "metadata": {"name": GO_CLUSTER},
        "spec": {"partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001",
                 "controlPlaneEndpoint": {"host": "127.100.0.150", "port": 443},
                 "firewallDeploymentRef": {"name": "go-firewall"}}});
    env.apply_seed_cluster(GO_CLUSTER, msc).await;
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let deployment_firewall = || async {
        let list = firewalls.list(&Default::default()).await.ok()?;
        let label = capms::ownership::FIREWALL_DEPLOYMENT_LABEL;
        let go = |f: &MetalStackFirewall| f.metadata.labels.as_ref()?.get(label).cloned();
        list.items
            .into_iter()
            .find(|f| go(f).as_deref() == Some("go-firewall"))
    };
    let waiting = || async {
        let reason = |f: MetalStackFirewall| {
            let status = f.status?;
            condition(&status.conditions, "Ready").map(|c| c.reason.clone())
        };
        deployment_firewall().await.and_then(reason).as_deref() == Some("NoMachineAvailable")
    };
    lives.until(env, "a Go provider's cluster", waiting).await;

    env.apply(template("v1-small-x86")).await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let ready = || async {
        let cluster = clusters.get(GO_CLUSTER).await.ok();
        let ready = cluster.and_then(|c| c.status).is_some_and(|s| s.ready);
        let firewall = deployment_firewall().await.and_then(|f| f.status);
        ready && firewall.is_some_and(|s| s.ready)
    };
    lives
        .until(env, "its firewall template changed", ready)
        .await;
}
