//! What else rolls the firewall: a change of the firewall template's contents, and the cluster
//! naming another template, here one of a bigger machine size.

use super::*;

fn template(name: &str, spec: &Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}}
    })
}

/// The machine size of the firewall `name` serves on, as metal-api has it.
async fn size_of(env: &Env, name: &str) -> String {
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let fw = firewalls.get(name).await.expect("the serving firewall");
    let machine = fw.status.and_then(|s| s.machine_id).expect("its machine");
    let (_, _, machines) = env.metal_state().await;
    let machine = machines.into_iter().find(|m| m.id == machine);
    machine
        .and_then(|m| m.size)
        .map(|s| s.id)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_template_and_a_template_of_another_size_roll_the_firewall_without_a_gap() {
    let mut env = Env::with_inventory("rollout-template", rollout_lab()).await;
    env.start_capms(&[DEADLINE]);
    let mut msc = lab_cluster();
    let mut spec = msc["spec"]
        .as_object_mut()
        .and_then(|s| s.remove("firewallSpec"))
        .expect("the lab cluster has a firewallSpec");
    msc["spec"]["firewallTemplateRef"] = json!({"name": "edge"});
    env.apply(template("edge", &spec)).await;
    env.apply_seed_cluster(MSC, msc).await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let provisioned = wait_stable(&env, &clusters, |_| true).await;
    let network = provisioned.status.and_then(|s| s.network_id);
    let watch = FirewallWatch::start(&env, network.expect("network"));

    // The template itself changes: a new egress rule.
    spec["rules"] = egress(8443)["rules"].clone();
    env.apply(template("edge", &spec)).await;
    let serving = rolled_from(&env, &format!("{MSC}-firewall")).await;

    // The cluster names another template, of a bigger size.
    spec["machineType"] = json!(MEDIUM);
    env.apply(template("edge-medium", &spec)).await;
    let patch = json!({"spec": {"firewallTemplateRef": {"name": "edge-medium"}}});
    clusters
        .patch(MSC, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("name the other template");
    let serving = rolled_from(&env, &serving).await;
    assert_eq!(size_of(&env, &serving).await, MEDIUM);
    watch.never_without_a_firewall().await;
}
