//! A cluster's machine listing (one `machine/find` shared by the cluster's objects) always holds
//! capms's own allocations: a machine just allocated is never missed (that would allocate a
//! second one), and it costs no new find; a machine capms freed leaves it, also without a new
//! find; an allocation that failed makes the old listing unusable.

use super::*;
use capms::controllers::allocation;
use capms::metal::types::{AllocationNetwork, MachineAllocateRequest, NetworkAllocateRequest};

const TAG: &str = "cluster.metal-stack.io/id=team-a.listed";

fn finds(rig: &Rig) -> u64 {
    let report = rig.sim.sim.stats().report();
    report
        .requests
        .iter()
        .filter(|r| r.route == "/v1/machine/find")
        .map(|r| r.count)
        .sum()
}

/// The cluster's listing, up to a minute old.
async fn listed(ctx: &Context) -> capms::controllers::fleet::Machines {
    ctx.fleet
        .machines(&ctx.metal, TAG, Duration::from_secs(60))
        .await
        .expect("listing")
}

fn request(network: &str, size: &str) -> MachineAllocateRequest {
    MachineAllocateRequest {
        name: "listed".into(),
        hostname: "listed".into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: size.into(),
        imageid: "ubuntu-26.4".into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.into(),
            autoacquire: None,
        }]),
        tags: vec![TAG.into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn own_allocations_and_frees_update_the_listing_and_failed_ones_invalidate_it() {
    let rig = rig().await;
    let ctx = &rig.ctx;
    let network = ctx
        .metal
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "listed".into(),
            ..Default::default()
        })
        .await
        .expect("network");
    let machines = listed(ctx).await;
    assert!(machines.is_empty());
    assert_eq!(finds(&rig), 1);

    let ok = request(&network.id, "v1-small-x86");
    let result = ctx.metal.machine_allocate(&ok).await;
    let machine = result.as_ref().expect("allocated").id.clone();
    allocation::allocated(ctx, &ok.tags, &result).await;
    let machines = listed(ctx).await;
    assert!(
        machines.iter().any(|m| m.id == machine),
        "the new machine is listed"
    );
    assert_eq!(finds(&rig), 1, "without a new find");

    let failing = request(&network.id, "no-such-size");
    let result = ctx.metal.machine_allocate(&failing).await;
    assert!(result.is_err());
    allocation::allocated(ctx, &failing.tags, &result).await;
    let machines = listed(ctx).await;
    assert_eq!(
        finds(&rig),
        2,
        "an allocation that failed makes the listing stale"
    );
    assert!(machines.iter().any(|m| m.id == machine));

    allocation::free(ctx, &metal_stack_machine(), &machine, "Machine")
        .await
        .expect("freed");
    let machines = listed(ctx).await;
    assert!(
        machines.iter().all(|m| m.id != machine),
        "the freed machine left the listing"
    );
    assert_eq!(finds(&rig), 2, "without a new find");
}
