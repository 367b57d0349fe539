//! Racks as Cluster API's failure domains: the MetalStackCluster reports the racks of its
//! partition with a free machine of its sizes, Cluster API copies them to its Cluster, a
//! MachineDeployment pinned to a rack lands there, and the list follows metal-api as other
//! users fill racks. A rack without a free machine, or one the cluster does not report, is a
//! condition, and nothing is allocated.

use super::*;
use kube::ResourceExt;
use kube::api::ListParams;

const DEPLOYMENT: &str = "rack-3-workers";

/// The lab with a third rack of four machines.
fn three_racks() -> Inventory {
    let mut lab = Inventory::default_lab();
    let template = lab.machines[0].clone();
    for n in 0..4 {
        let mut machine = template.clone();
        machine.id = format!("00000000-0000-0000-0003-{n:012}");
        machine.rack = "rack-3".into();
        lab.machines.push(machine);
    }
    lab
}

/// A MachineDeployment of `replicas` workers placed in rack-3.
fn pinned(replicas: u32) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT},
        "spec": {
            "clusterName": MSC, "replicas": replicas,
            // What Cluster API's webhook would default (its webhooks do not run here).
            "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
            "selector": {"matchLabels": {"deployment": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"deployment": DEPLOYMENT}},
                "spec": {"clusterName": MSC, "failureDomain": "rack-3",
                         "bootstrap": {"dataSecretName": "bootstrap"},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "MetalStackMachineTemplate", "name": "workers"}}
            }
        }
    })
}

impl Env {
    /// The racks the MetalStackCluster and Cluster API's Cluster report, once both are `racks`.
    async fn reports_racks(&self, racks: &[&str]) {
        let clusters: Api<MetalStackCluster> = Api::namespaced(self.client(), &self.ns.name);
        let capi = self.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
        let what = format!("the failure domains {racks:?}");
        eventually_seen(&what, support::LOADED_MACHINE_WAIT, || async {
            let msc = clusters.get(MSC).await.map_err(|e| e.to_string())?;
            let status = msc.status.unwrap_or_default();
            let ours: Vec<&str> = status
                .failure_domains
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            let cluster = capi.get(MSC).await.map_err(|e| e.to_string())?;
            let domains = cluster.data["status"]["failureDomains"].as_array().cloned();
            let theirs: Vec<String> = domains
                .unwrap_or_default()
                .iter()
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            match (ours == racks, theirs == racks) {
                (true, true) => Ok(()),
                _ => Err(format!("MetalStackCluster {ours:?}, Cluster {theirs:?}")),
            }
        })
        .await;
    }

    /// The free machines of `rack` but `keep` allocated by another team, behind capms's back.
    fn others_take(&self, rack: &str, network: &str, keep: usize) {
        let mut state = self.sim.sim.state();
        let free: Vec<String> = state
            .machine_find(&MachineFindRequest::default())
            .into_iter()
            .filter(|m| m.rackid == rack && m.allocation.is_none())
            .map(|m| m.id)
            .collect();
        for id in free.into_iter().skip(keep) {
            let request = MachineAllocateRequest {
                uuid: Some(id.clone()),
                ..super::orphans::planted(network, Vec::new())
            };
            state
                .machine_allocate(&request, None, "machine", "other-team")
                .expect("another team's allocation");
        }
    }

    /// The racks of the machines allocated for the cluster.
    async fn racks_of_cluster(&self) -> Vec<(String, String)> {
        let (_, _, machines) = self.metal_state().await;
        let tag = format!("cluster.metal-stack.io/id={}.{MSC}", self.ns.name);
        let ours = machines.into_iter().filter(|m| m.tags.contains(&tag));
        ours.map(|m| (m.id, m.rackid)).collect()
    }
}

/// The MetalStackMachines Cluster API made for the MachineDeployment.
fn deployment_machines() -> ListParams {
    ListParams::default().labels(&format!("cluster.x-k8s.io/deployment-name={DEPLOYMENT}"))
}

impl Env {
    /// The MachineDeployment's MetalStackMachines, once `n` of them are ready.
    async fn deployment_ready(&self, n: usize) -> Vec<MetalStackMachine> {
        let machines: Api<MetalStackMachine> = Api::namespaced(self.client(), &self.ns.name);
        let deployments = self.dynamic(
            "cluster.x-k8s.io/v1beta2",
            "MachineDeployment",
            "machinedeployments",
        );
        let what = format!("{n} workers of the MachineDeployment ready");
        eventually_seen(&what, support::LOADED_MACHINE_WAIT, || async {
            let list = machines
                .list(&deployment_machines())
                .await
                .map_err(|e| e.to_string())?;
            let ready = |m: &&MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
            let ready: Vec<MetalStackMachine> = list.items.iter().filter(ready).cloned().collect();
            if ready.len() == n {
                return Ok(ready);
            }
            let md = deployments
                .get(DEPLOYMENT)
                .await
                .map(|d| d.data["status"].clone());
            let statuses: Vec<_> = list.items.iter().map(|m| &m.status).collect();
            Err(format!(
                "{statuses:?}; the MachineDeployment's status {md:?}; Cluster API's log:\n{}",
                self.capi_log()
            ))
        })
        .await
    }
}

/// The Ready condition of MetalStackMachine `name` once its reason is `reason`.
async fn waits_with(env: &Env, name: &str, reason: &str) -> String {
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let what = format!("{name} to wait with {reason}");
    eventually_seen(&what, support::LOADED_MACHINE_WAIT, || async {
        let m = machines.get(name).await.map_err(|e| e.to_string())?;
        let status = m.status.unwrap_or_default();
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
        match ready {
            Some(c) if c.reason == reason && c.status == "False" => Ok(c.message.clone()),
            other => Err(format!("Ready {other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn machines_land_in_the_rack_cluster_api_places_them_in_and_the_racks_follow_metal_api() {
    let mut env = Env::with_inventory("racks", three_racks()).await;
    env.start_capms(&["--catalog-refresh=2s"]);
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
        "metadata": {"name": "workers"},
        "spec": {"template": {"spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}}}
    }))
    .await;
    env.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"},
        "stringData": {"value": "#cloud-config\n"}}),
    )
    .await;
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let msc = wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let network = msc.status.and_then(|s| s.network_id).expect("network");
    env.reports_racks(&["rack-1", "rack-2", "rack-3"]).await;

    // Three machines of rack-3 are free, wherever the firewall went.
    env.others_take("rack-3", &network, 3);
    // Cluster API places three replicas in rack-3 (metal-api alone would spread them over the
    // racks); capms allocates them all there and says so.
    env.apply(pinned(3)).await;
    let ready = env.deployment_ready(3).await;
    let rack_3 = Some("rack-3");
    for m in &ready {
        let status = m.status.as_ref();
        assert_eq!(
            status.and_then(|s| s.failure_domain.as_deref()),
            rack_3,
            "{}",
            m.name_any()
        );
    }
    let before = env.racks_of_cluster().await;
    for m in &ready {
        let id = m
            .spec
            .provider_id
            .as_deref()
            .and_then(|p| p.rsplit('/').next());
        let id = id.expect("providerID").to_owned();
        assert!(before.contains(&(id, "rack-3".to_owned())), "{before:?}");
    }
    let capi_machines = env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines");
    let owner = ready[0].owner_references().first().map(|o| o.name.clone());
    let owner = owner.expect("the owning Machine");
    eventually_seen(
        "the Machine to show its rack",
        support::LOADED_MACHINE_WAIT,
        || async {
            let m = capi_machines.get(&owner).await.map_err(|e| e.to_string())?;
            match m.data["status"]["failureDomain"].as_str() {
                Some("rack-3") => Ok(()),
                other => Err(format!("status.failureDomain {other:?}")),
            }
        },
    )
    .await;

    // rack-3 is full: it stays listed (the cluster's machines are there), and a fourth replica
    // placed there waits, naming the racks that have a machine, allocating none.
    env.apply(pinned(4)).await;
    let names: Vec<String> = ready.iter().map(ResourceExt::name_any).collect();
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let fourth = eventually_seen(
        "the fourth replica",
        support::LOADED_MACHINE_WAIT,
        || async {
            let list = machines
                .list(&deployment_machines())
                .await
                .map_err(|e| e.to_string())?;
            let other = list
                .items
                .into_iter()
                .find(|m| !names.contains(&m.name_any()));
            other
                .map(|m| m.name_any())
                .ok_or_else(|| "three replicas".to_owned())
        },
    )
    .await;
    let message = waits_with(&env, &fourth, "NoMachineInFailureDomain").await;
    assert!(
        message.contains("free in rack rack-3")
            && message.contains("racks with one: rack-1, rack-2"),
        "{message}"
    );
    assert_eq!(env.racks_of_cluster().await, before, "nothing allocated");
    env.reports_racks(&["rack-1", "rack-2", "rack-3"]).await;

    // A rack without a machine of the cluster, emptied by others, drops out of the list.
    let firewall_rack = before
        .iter()
        .find(|(_, r)| r != "rack-3")
        .map(|(_, r)| r.clone())
        .unwrap_or_else(|| "rack-3".to_owned());
    let emptied = if firewall_rack == "rack-1" {
        "rack-2"
    } else {
        "rack-1"
    };
    env.others_take(emptied, &network, 0);
    let left: Vec<&str> = ["rack-1", "rack-2", "rack-3"]
        .into_iter()
        .filter(|r| *r != emptied)
        .collect();
    env.reports_racks(&left).await;

    // A Machine naming a rack the cluster does not report: a condition naming the valid ones.
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": "nowhere"},
        "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
    }))
    .await;
    env.apply(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "nowhere"},
        "spec": {"clusterName": MSC, "failureDomain": "rack-9", "bootstrap": {"dataSecretName": "bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": "nowhere"}}
    }))
    .await;
    let message = waits_with(&env, "nowhere", "FailureDomainNotReported").await;
    assert!(
        message.contains("\"rack-9\"") && message.contains(&format!("valid: {}", left.join(", "))),
        "{message}"
    );
    assert_eq!(env.racks_of_cluster().await, before, "nothing allocated");
}
