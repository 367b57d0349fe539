//! A cluster's machine listing (one `machine/find` shared by the cluster's objects) always holds
//! capms's own allocations: a machine just allocated is never missed (that would allocate a
//! second one), and it costs no new find; a machine capms freed leaves it, also without a new
//! find; an allocation that failed makes the old listing unusable. Each new listing wakes the
//! objects whose machine changed stage or went.

use super::*;
use capms::cache::listings::{ListedMachines, Query};
use capms::controllers::allocation;
use metal_api::types::{AllocationNetwork, MachineAllocateRequest, NetworkAllocateRequest};

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
async fn listed(ctx: &Context) -> ListedMachines {
    listed_within(ctx, Duration::from_secs(60)).await
}

/// The cluster's listing, at most `max_age` old.
async fn listed_within(ctx: &Context, max_age: Duration) -> ListedMachines {
    let query = Query {
        cluster_tag: TAG.into(),
        max_age,
    };
    ctx.listings
        .machines(ctx.metal.own(), &query)
        .await
        .expect("listing")
}

/// A machine of the listed cluster, in `network`, of `size`.
pub(super) fn request(network: &str, size: &str) -> MachineAllocateRequest {
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

/// A private network for the listed machines.
async fn private_network(ctx: &Context) -> metal_api::types::Network {
    ctx.metal
        .own()
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "listed".into(),
            ..Default::default()
        })
        .await
        .expect("network")
}

#[tokio::test]
async fn own_allocations_and_frees_update_the_listing_and_failed_ones_invalidate_it() {
    let rig = rig().await;
    let ctx = &rig.ctx;
    let network = private_network(ctx).await;
    let machines = listed(ctx).await;
    assert!(machines.is_empty());
    assert_eq!(finds(&rig), 1);

    // Allocated for a MetalStackMachine: freeing it for that object takes it out of the listing.
    let msm = metal_stack_machine();
    let marks = capms::ownership::identity_of(capms::ownership::OwnerKind::Machine, &msm);
    let mut ok = request(&network.id, "v1-small-x86");
    ok.tags.extend(capms::ownership::owner_tags(&marks));
    let result = ctx.metal.own().machine_allocate(&ok).await;
    let machine = result.as_ref().expect("allocated").id.clone();
    allocation::allocated(ctx, &ok.tags, &result).await;
    let machines = listed(ctx).await;
    assert!(
        machines.iter().any(|m| m.id == machine),
        "the new machine is listed"
    );
    assert_eq!(finds(&rig), 1, "without a new find");

    let failing = request(&network.id, "no-such-size");
    let result = ctx.metal.own().machine_allocate(&failing).await;
    assert!(result.is_err());
    allocation::allocated(ctx, &failing.tags, &result).await;
    let machines = listed(ctx).await;
    assert_eq!(
        finds(&rig),
        2,
        "an allocation that failed makes the listing stale"
    );
    assert!(machines.iter().any(|m| m.id == machine));

    allocation::free(ctx, ctx.metal.own(), &msm, &marks, &machine, "Machine")
        .await
        .expect("freed");
    let machines = listed(ctx).await;
    assert!(
        machines.iter().all(|m| m.id != machine),
        "the freed machine left the listing"
    );
    assert_eq!(finds(&rig), 2, "without a new find");
}

/// A rig whose machines take 1 s per lifecycle step: time enough to list them between steps.
async fn slow_rig() -> Rig {
    let step = Duration::from_secs(1);
    let timings = metal_sim::Timings {
        installing: step,
        booting: step,
        phoned_home: step,
        ..metal_sim::Timings::fast()
    };
    rig_timed(Settings::default(), timings).await
}

#[tokio::test]
async fn a_new_listing_wakes_the_objects_whose_machine_changed_stage_or_went() {
    use capms::ownership::{OwnerKind, owner_marks, owner_tags};
    let rig = slow_rig().await;
    let ctx = &rig.ctx;
    let network = private_network(ctx).await;
    let mut machines = ctx.listings.follow(OwnerKind::Machine);
    let mut firewalls = ctx.listings.follow(OwnerKind::Firewall);
    let mut ok = request(&network.id, "v1-small-x86");
    ok.tags.extend(owner_tags(&owner_marks(
        OwnerKind::Machine,
        NS,
        "worker-0",
        "uid",
    )));
    listed_within(ctx, Duration::ZERO).await;
    let result = ctx.metal.own().machine_allocate(&ok).await;
    let id = result.as_ref().expect("allocated").id.clone();
    allocation::allocated(ctx, &ok.tags, &result).await;
    listed_within(ctx, Duration::ZERO).await;
    assert!(
        machines.try_recv().is_err(),
        "capms's own allocation, still provisioning, wakes nobody"
    );

    support::eventually(
        "the machine to phone home",
        Duration::from_secs(60),
        || async {
            let machine = rig.sim.sim.state().machine(&id).ok()?;
            (machine.health() == metal_api::types::MachineHealth::Ready).then_some(())
        },
    )
    .await;
    listed_within(ctx, Duration::ZERO).await;
    let woken = machines.try_recv().expect("a wake");
    assert_eq!(woken, (NS.to_owned(), "worker-0".to_owned()), "phoned home");
    listed_within(ctx, Duration::ZERO).await;
    assert!(machines.try_recv().is_err(), "no change, no wake");
    assert!(firewalls.try_recv().is_err(), "no firewall changed");

    ctx.metal
        .own()
        .machine_free(&id)
        .await
        .expect("freed outside capms");
    listed_within(ctx, Duration::ZERO).await;
    let woken = machines.try_recv().expect("a wake");
    assert_eq!(woken.1, "worker-0", "its machine went");
}
