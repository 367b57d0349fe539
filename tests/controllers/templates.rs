//! Firewall templates: a cluster waits for the one it names, then clones it.

use super::*;

#[tokio::test(flavor = "current_thread")]
async fn a_cluster_waits_for_its_firewall_template_then_clones_it() {
    let mut env = Env::with_inventory("fwtemplate", Inventory::default_lab()).await;
    // capms runs with the shipped ClusterRole, so its rule for firewall templates is proven too.
    let user = format!("capms-{}", env.ns.name);
    bind_user(&env, &user, shipped_cluster_role(&user, true)).await;
    env.kubeconfig = Some(ControlPlane::shared().user_kubeconfig(&user, env.work.path()));
    env.start_capms(&[]);

    let mut msc = lab_cluster();
    let inline = msc["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec")
        .expect("the lab cluster has a firewallSpec");
    msc["spec"]["firewallTemplateRef"] = json!({"name": "edge"});
    env.apply_seed_cluster(MSC, msc).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    waits_for_the_template_naming_it(&clusters).await;
    // Woken once more, capms looks at the cluster and still waits; then its queues are empty:
    // the reconciles Cluster API's own updates cause are over, so that only the template watch
    // can wake the cluster in time.
    let nudged = super::looks::nudge(&clusters, MSC).await;
    let looks = env.looked("MetalStackCluster", MSC, nudged, 1).await;
    assert_eq!(looks[0].step, "Nothing", "{looks:?}");
    env.idle().await;
    let (_, _, machines) = env.metal_state().await;
    assert!(
        machines.iter().all(|m| m.allocation.is_none()),
        "no firewall without its template"
    );

    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "edge"},
        "spec": {"template": {"metadata": {"labels": {"team": "net"}}, "spec": inline}}
    }))
    .await;
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    // The template watch wakes the cluster at once (the safety-net requeue is 5 minutes away).
    eventually(
        "the firewall created from the template",
        Duration::from_secs(120),
        || async { firewalls.get_opt(&format!("{MSC}-firewall")).await.ok()? },
    )
    .await;
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    the_firewall_is_cloned_from_the_template(&firewalls, &inline).await;
    let (_, _, machines) = env.metal_state().await;
    assert_eq!(
        machines.iter().filter(|m| m.allocation.is_some()).count(),
        1,
        "one firewall"
    );
}

/// Without its template the cluster waits, and its condition names the field, the template and
/// the templates there are.
async fn waits_for_the_template_naming_it(clusters: &Api<MetalStackCluster>) {
    let waiting = wait_condition(
        clusters,
        MSC,
        "FirewallReady=False/FirewallTemplateNotFound",
        |c| {
            c.status
                .as_ref()
                .and_then(|s| condition(&s.conditions, "FirewallReady"))
                .is_some_and(|c| c.status == "False" && c.reason == "FirewallTemplateNotFound")
        },
    )
    .await;
    let message = &condition(
        &waiting.status.as_ref().expect("status").conditions,
        "FirewallReady",
    )
    .expect("condition")
    .message;
    assert!(
        message.contains("spec.firewallTemplateRef")
            && message.contains("edge")
            && message.ends_with("MetalStackFirewallTemplates in the namespace: none"),
        "{message}"
    );
}

/// The firewall has the template's spec (and the machine it got), its labels, and the
/// annotation Cluster API uses for clones.
async fn the_firewall_is_cloned_from_the_template(
    firewalls: &Api<MetalStackFirewall>,
    inline: &Value,
) {
    let fw = firewalls
        .get(&format!("{MSC}-firewall"))
        .await
        .expect("the cluster's firewall");
    let mut spec = serde_json::to_value(&fw.spec).expect("json");
    assert!(
        spec.as_object_mut()
            .expect("spec")
            .remove("providerID")
            .is_some(),
        "the allocated machine is recorded"
    );
    assert_eq!(&spec, inline, "the firewall has the template's spec");
    let labels = fw.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("net"));
    assert_eq!(
        labels
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some(MSC)
    );
    assert_eq!(
        fw.metadata
            .annotations
            .unwrap_or_default()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some("edge")
    );
}
