//! From nothing to ready: one external write and at most one status write per reconcile.

use super::*;

#[tokio::test]
async fn a_cluster_walks_from_nothing_to_ready_one_write_at_a_time() {
    let (rig, msc) = cluster_rig().await;
    let (rounds, last) = walk::<Clusters>(&rig, &msc, 8, ready).await;
    // finalizer, network, IP, endpoint (+ the status that says ready).
    let external: Vec<String> = rounds
        .iter()
        .flatten()
        .filter(|w| !w.is_status())
        .map(|w| format!("{} {}", w.method, w.content_type))
        .collect();
    assert_eq!(
        external,
        [
            "PATCH application/json-patch+json",
            "PATCH application/merge-patch+json"
        ],
        "the finalizer and the endpoint are the only object writes"
    );
    assert_eq!(last, Action::requeue(Duration::from_secs(300)));
    let done = rig.api.get(&msc);
    let status = done.status.expect("status");
    let network = status.network_id.clone().expect("network");
    let endpoint = done.spec.control_plane_endpoint.expect("endpoint");
    assert_eq!(status.allocated_control_plane_ip, endpoint.host);
    let editor = rig.sim.editor();
    let allocated = editor.network(&network).await.expect("the network exists");
    assert_eq!(allocated.projectid, PROJECT);
    let ip = editor
        .ip(endpoint.host.as_deref().expect("host"))
        .await
        .expect("the IP exists");
    assert!(ip.ipaddress.starts_with("127."), "loopback only");

    // Ready and unchanged: a reconcile reads, and writes nothing at all.
    let again = reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(again, Action::requeue(Duration::from_secs(300)));
    assert!(rig.api.take_writes().is_empty(), "nothing to write");
}

#[tokio::test]
async fn events_the_apiserver_never_answers_hold_up_no_reconcile() {
    let (rig, msc) = cluster_rig().await;
    rig.api.stall_events.store(true, Ordering::SeqCst);
    // The walk takes well under a second; the limit only turns a hang into a failure.
    let walk = walk::<Clusters>(&rig, &msc, 8, ready);
    let walked = tokio::time::timeout(support::LOADED_MACHINE_WAIT, walk).await;
    assert!(walked.is_ok(), "a reconcile waited for an Event's answer");
}

#[tokio::test]
async fn refused_status_writes_hold_up_nothing_and_allocate_nothing_twice() {
    let (rig, msc) = cluster_rig().await;
    rig.api.refuse_status.store(true, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    let endpoint_written = |c: &MetalStackCluster| {
        c.spec
            .control_plane_endpoint
            .as_ref()
            .is_some_and(|e| e.host.is_some())
    };
    for _ in 0..8 {
        let current = rig.api.get(&msc);
        if endpoint_written(&current) {
            break;
        }
        // A refused status write fails the reconcile unless a metal-api step was just taken:
        // then the next reconcile comes at once, without backoff.
        let outcome = reconcile::<Clusters>(Arc::new(current), rig.ctx.clone()).await;
        outcomes.push(outcome.map_err(|e| e.to_string()));
    }
    let at_once = outcomes
        .iter()
        .filter(|o| o.as_ref().ok() == Some(&Action::requeue(Duration::ZERO)))
        .count();
    assert_eq!(
        at_once, 2,
        "network and IP allocated, each observed at once: {outcomes:?}"
    );
    let current = rig.api.get(&msc);
    assert!(endpoint_written(&current), "provisioned without any status");
    assert!(current.status.is_none());
    rig.api.refuse_status.store(false, Ordering::SeqCst);
    rig.api.take_writes();
    walk::<Clusters>(&rig, &msc, 3, ready).await;
    let editor = rig.sim.editor();
    let ours = |labels: &std::collections::BTreeMap<String, String>| {
        labels.values().any(|v| v == "uid-msc")
    };
    let networks = editor.networks().await.expect("networks");
    assert_eq!(
        networks.iter().filter(|n| ours(&n.labels)).count(),
        1,
        "one network"
    );
    let ips = editor
        .ip_find(&metal_api::types::IpFindRequest::default())
        .await
        .expect("ips");
    assert_eq!(
        ips.iter()
            .filter(|ip| ip.tags.iter().any(|t| t.ends_with("=uid-msc")))
            .count(),
        1,
        "one control-plane IP"
    );
}

#[tokio::test]
async fn the_firewall_follows_the_cluster_spec_until_it_is_allocated() {
    let rig = rig().await;
    let spec = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    };
    let mut msc = metal_stack_cluster(Some(spec));
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    let has_firewall = |c: &MetalStackCluster| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "FirewallReady" && c.reason == "FirewallCreated")
        })
    };
    walk::<Clusters>(&rig, &msc, 8, has_firewall).await;
    let mut fw = MetalStackFirewall::new("prod-firewall", MetalStackFirewallSpec::default());
    fw.metadata.namespace = Some(NS.into());
    assert_eq!(rig.api.get(&fw).spec.image, "firewall-ubuntu-3.0");

    // An edit before the firewall is allocated reaches it.
    msc = rig.api.get(&msc);
    if let Some(s) = msc.spec.firewall_spec.as_mut() {
        s.machine_type = "v1-large-x86".into();
    }
    msc.metadata.generation = Some(2);
    rig.api.put(&msc);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(rig.api.get(&fw).spec.machine_type, "v1-large-x86");
    assert!(
        rig.api
            .take_writes()
            .iter()
            .any(|w| w.content_type == "application/apply-patch+yaml"
                && w.path.ends_with("/metalstackfirewalls/prod-firewall")),
        "applied by server-side apply"
    );

    // Once allocated, the firewall keeps its spec: the changed spec gets a firewall of its own,
    // named after it, and the allocated one stays until that is ready.
    let mut allocated = rig.api.get(&fw);
    allocated.spec.provider_id =
        Some("metal://mini-lab/00000000-0000-0000-0000-000000000001".into());
    rig.api.put(&allocated);
    if let Some(s) = msc.spec.firewall_spec.as_mut() {
        s.machine_type = "v1-small-x86".into();
    }
    rig.api.put(&msc);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(
        rig.api.get(&fw).spec.machine_type,
        "v1-large-x86",
        "not applied"
    );
    let created = rig.api.take_object_writes();
    let rolled = created.iter().find(|w| {
        w.content_type == "application/apply-patch+yaml"
            && w.path.contains("/metalstackfirewalls/prod-firewall-")
    });
    let rolled = rolled.unwrap_or_else(|| panic!("a firewall for the new spec: {created:?}"));
    assert_eq!(rolled.body["spec"]["machineType"], "v1-small-x86");
}

#[tokio::test]
async fn a_machine_is_allocated_named_ready_and_freed() {
    let (rig, msm) = machine_rig().await;
    let provisioned = |m: &MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
    // The simulator installs machines in the background: poll as the backoff would.
    let mut rounds = 0;
    while !provisioned(&rig.api.get(&msm)) {
        rounds += 1;
        assert!(rounds < 200, "not ready: {:?}", rig.api.get(&msm).status);
        let _ = walk::<Machines>(&rig, &msm, 1, |_| true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = rig.api.get(&msm);
    let provider_id = ready.spec.provider_id.clone().expect("named");
    let machine_id = provider_id.rsplit('/').next().expect("id").to_owned();
    let machine = rig
        .sim
        .editor()
        .machine(&machine_id)
        .await
        .expect("machine");
    let allocation = machine.allocation.expect("allocated");
    assert_eq!(allocation.hostname, "node-1", "from the cloud-config");
    assert!(ready.labels_contain_rack(), "rack label");

    // Deleted: the machine is freed, then the finalizer goes; the cluster's listing answers
    // both looks, so that costs the free and at most one find.
    let mut deleting = rig.api.get(&msm);
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    rig.api.put(&deleting);
    let before = metal_calls(&rig);
    let (rounds, _) = walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let calls = metal_calls(&rig) - before;
    assert!(calls <= 2, "{calls} metal-api calls to free one machine");
    // The free is followed at once by the look that lets the object go: neither writes status.
    let statuses = rounds.iter().flatten().filter(|w| w.is_status()).count();
    assert_eq!(statuses, 0, "{rounds:#?}");
    let freed = rig
        .sim
        .editor()
        .machine(&machine_id)
        .await
        .expect("machine");
    assert!(freed.allocation.is_none(), "freed");
}

/// Something else wakes a machine right after capms wrote to it, before the watch brings the
/// write back: that reconcile reads the older copy. It waits for the newer one rather than
/// writing again from what it read.
#[tokio::test]
async fn a_copy_from_before_capms_own_write_waits_for_the_newer_one() {
    let (rig, msm) = machine_rig().await;
    rig.api.take_writes();
    let older = Arc::new(rig.api.get(&msm));
    let allocations = || metal_calls_to(&rig, "/v1/machine/allocate");
    reconcile::<Machines>(older.clone(), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(allocations(), 1, "allocated first");
    let first = rig.api.take_object_writes();
    assert!(first.is_empty(), "no object write before it: {first:#?}");
    // Nothing was written to the object: the copy is still current, and names its machine.
    reconcile::<Machines>(older.clone(), rig.ctx.clone())
        .await
        .expect("reconcile");
    let named = rig.api.take_object_writes();
    assert_eq!(
        named.len(),
        1,
        "the machine's name and the finalizer: {named:#?}"
    );
    let held = reconcile::<Machines>(older, rig.ctx.clone())
        .await
        .expect("reconcile");
    let again = rig.api.take_object_writes();
    assert!(again.is_empty(), "the older copy wrote: {again:#?}");
    assert_ne!(held, Action::await_change(), "it is looked at again");
    // The watch's copy, with the finalizer and the name, goes on to write the status.
    walk::<Machines>(&rig, &msm, 2, |m| m.status.is_some()).await;
    assert_eq!(allocations(), 1, "nothing allocated twice");
}

/// Every metal-api request the simulator has answered.
fn metal_calls(rig: &Rig) -> u64 {
    metal_calls_to(rig, "")
}

/// The metal-api requests the simulator has answered on routes containing `route`.
fn metal_calls_to(rig: &Rig, route: &str) -> u64 {
    let report = rig.sim.sim.stats().report();
    let calls = report.requests.iter().filter(|r| r.route.contains(route));
    calls.map(|r| r.count).sum()
}

trait RackLabel {
    fn labels_contain_rack(&self) -> bool;
}

impl RackLabel for MetalStackMachine {
    fn labels_contain_rack(&self) -> bool {
        self.meta()
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(capms::controllers::machine::RACK_LABEL))
    }
}
