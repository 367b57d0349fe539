//! The handoff window: a machine that has phoned home is reported provisioned only while fewer
//! than `--handoff-window` handed over before it wait for Cluster API to take them up.

use super::*;
use capms::controllers::machine::watches::woken_by_uptake;
use capms::reconciler::handoffs::HANDOFF_TIMEOUT;
use kube::runtime::reflector::ObjectRef;
use std::time::Instant;

/// worker-`n`'s Machine and MetalStackMachine, sharing worker-0's bootstrap Secret.
fn worker(n: usize) -> (Machine, MetalStackMachine) {
    let name = format!("worker-{n}");
    let mut machine = capi_machine();
    machine.metadata.name = Some(name.clone());
    let mut msm = metal_stack_machine();
    msm.metadata.name = Some(name.clone());
    msm.metadata.uid = Some(format!("uid-msm-{n}"));
    msm.metadata.owner_references = Some(vec![owner("Machine", &name)]);
    (machine, msm)
}

fn reported_ready(msm: &MetalStackMachine) -> bool {
    msm.status.as_ref().is_some_and(|s| s.ready)
}

#[tokio::test]
async fn beyond_the_window_a_machine_waits_unwritten_until_cluster_api_takes_one_up() {
    let settings = Settings {
        handoff_window: 1,
        ..Settings::default()
    };
    // Machines phone home as soon as they are allocated.
    let timings = metal_sim::Timings {
        installing: Duration::ZERO,
        booting: Duration::ZERO,
        phoned_home: Duration::ZERO,
        ..metal_sim::Timings::fast()
    };
    let rig = rig_timed(settings, timings).await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    walk::<Clusters>(&rig, &msc, 8, ready).await;
    rig.api.put(&bootstrap());
    let (first_machine, first) = worker(0);
    let (second_machine, second) = worker(1);
    for (machine, msm) in [(&first_machine, &first), (&second_machine, &second)] {
        rig.api.put(machine);
        rig.api.put(msm);
    }
    let first_key = ObjectRef::new("worker-0").within(NS);
    let first_machine_key = ObjectRef::new("worker-0").within(NS);

    // worker-0 is handed over and takes the one place.
    let mut rounds = 0;
    while !reported_ready(&rig.api.get(&first)) {
        rounds += 1;
        assert!(
            rounds < 200,
            "worker-0 not ready: {:?}",
            rig.api.get(&first).status
        );
        walk::<Machines>(&rig, &first, 1, |_| true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // worker-1's machine phones home: it is allocated and may be named, but never reported
    // ready, and once its machine has phoned home a reconcile writes nothing and looks again
    // by the window's timeout.
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 200, "worker-1 never met the full window");
        // worker-0's place, kept from timing out on a slow machine: Cluster API has not taken
        // it up.
        rig.ctx
            .handoffs
            .admit(&first_key, &first_machine_key, Instant::now());
        let action = reconcile::<Machines>(Arc::new(rig.api.get(&second)), rig.ctx.clone())
            .await
            .expect("reconcile");
        let writes = rig.api.take_object_writes();
        assert!(
            !reported_ready(&rig.api.get(&second)),
            "reported ready beyond the window"
        );
        if action == Action::requeue(HANDOFF_TIMEOUT) {
            assert!(
                writes.is_empty(),
                "a wait for a place is unwritten: {writes:#?}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A Machine not yet taken up frees nothing; Cluster API copying worker-0's providerID
    // frees its place for worker-1, which is woken and then reported ready.
    assert!(woken_by_uptake(&rig.ctx.handoffs, &first_machine).is_empty());
    let mut taken_up = first_machine.clone();
    taken_up.spec.provider_id = rig.api.get(&first).spec.provider_id;
    assert!(taken_up.spec.provider_id.is_some());
    rig.api.put(&taken_up);
    let woken = woken_by_uptake(&rig.ctx.handoffs, &taken_up);
    assert_eq!(woken, vec![ObjectRef::new("worker-1").within(NS)]);
    walk::<Machines>(&rig, &second, 3, reported_ready).await;
}
