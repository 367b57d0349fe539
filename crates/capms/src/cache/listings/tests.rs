//! The listings: what they keep of a machine, a free's removal from them, and how often a
//! cluster on API v2 lists.

use super::*;
use metal_api::types::{
    FirewallRules, Image, MachineAllocation, MachineEvent, MachineNic, Partition, Size,
};

fn event(name: &str) -> MachineEvent {
    MachineEvent {
        event: name.to_owned(),
        ..Default::default()
    }
}

/// An allocated machine as metal-api lists it, with everything a listing drops.
fn whole_machine() -> Machine {
    let mut m = Machine {
        id: "m1".into(),
        rackid: "rack-1".into(),
        liveliness: "Alive".into(),
        tags: vec!["cluster.metal-stack.io/id=ns.c".into()],
        partition: Some(Partition {
            id: "fra-equ01".into(),
            ..Default::default()
        }),
        size: Some(Size {
            id: "c1-xlarge-x86".into(),
            ..Default::default()
        }),
        allocation: Some(MachineAllocation {
            hostname: "worker-0".into(),
            image: Some(Image {
                id: "ubuntu-24.4".into(),
                ..Default::default()
            }),
            user_data: "I2Nsb3VkLWNvbmZpZw==".into(),
            ssh_pub_keys: vec!["ssh-ed25519 AAAA".into()],
            firewall_rules: Some(FirewallRules::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    m.hardware.nics = vec![MachineNic::default(); 4];
    m.bios.vendor = "vendor".into();
    m.events.log = vec![
        event("Phoned Home"),
        event("Booting New Kernel"),
        event("Installing"),
    ];
    m.events.crash_loop = true;
    m
}

#[test]
fn a_listing_keeps_what_reconciles_read_and_drops_hardware_old_events_user_data_and_keys() {
    let m = whole_machine();
    let kept = kept(m.clone());
    assert_eq!(kept.hardware, Default::default());
    assert_eq!((&kept.partition, &kept.size), (&None, &None));
    assert_eq!(kept.last_event(), Some("Phoned Home"));
    assert_eq!(kept.events.log.len(), 1);
    assert!(kept.events.crash_loop);
    assert_eq!(
        (&kept.id, &kept.rackid, &kept.liveliness, &kept.tags),
        (&m.id, &m.rackid, &m.liveliness, &m.tags)
    );
    let mut allocation = m.allocation.clone().expect("allocated");
    (allocation.user_data, allocation.ssh_pub_keys) = (String::new(), Vec::new());
    (allocation.image, allocation.firewall_rules) = (None, None);
    assert_eq!(kept.allocation, Some(allocation));
    assert_eq!(stage(&kept), stage(&m));
}

#[test]
fn a_listed_machine_decodes_as_the_listing_keeps_the_whole_machine() {
    let m = whole_machine();
    let answer = serde_json::to_string(&vec![m.clone()]).expect("json");
    let listed: Vec<Listed> = serde_json::from_str(&answer).expect("listed");
    let Some(Listed(decoded)) = listed.into_iter().next() else {
        panic!("one machine listed");
    };
    assert_eq!(
        (&decoded.hardware, &decoded.bios),
        (&Default::default(), &Default::default())
    );
    let allocation = decoded.allocation.as_ref().expect("allocated");
    assert_eq!(
        (allocation.user_data.as_str(), allocation.ssh_pub_keys.len()),
        ("", 0)
    );
    assert_eq!(
        (&allocation.image, &allocation.firewall_rules),
        (&None, &None)
    );
    assert_eq!((&decoded.partition, &decoded.size), (&None, &None));
    assert_eq!(decoded.events.log, m.events.log[..1]);
    assert_eq!(kept(decoded), kept(m));
}

fn owner(name: &str) -> BTreeMap<String, String> {
    [("machine-resource".to_owned(), format!("ns.{name}"))].into()
}

/// Machine `id` allocated for `owner`, as a listing holds it.
fn allocated_for(id: &str, owner: &BTreeMap<String, String>) -> Machine {
    let mut tags = crate::ownership::owner_tags(owner);
    tags.push(CLUSTER_TAG.to_owned());
    Machine {
        id: id.into(),
        tags,
        allocation: Some(MachineAllocation::default()),
        ..Default::default()
    }
}

const CLUSTER_TAG: &str = "cluster.metal-stack.io/id=ns.c";

/// A listing whose find answered `machines`, fresh.
async fn listed(listings: &Listings, machines: Vec<Machine>) {
    let slot = listings.slot(CLUSTER_TAG);
    *slot.listing.lock().await = Some(Snapshot {
        requested: Instant::now(),
        epoch: listings.epoch(&slot),
        machines: Arc::new(machines.into_iter().map(kept).collect()),
    });
}

async fn shown(listings: &Listings) -> Vec<(String, Vec<String>)> {
    let slot = listings.slot(CLUSTER_TAG);
    let listing = slot.listing.lock().await;
    let machines = listing.as_ref().map(|l| l.machines.clone());
    machines
        .into_iter()
        .flat_map(|ms| {
            ms.iter()
                .map(|m| (m.id.clone(), m.tags.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn a_machine_capms_freed_is_known_freed_until_it_allocates_it_again() {
    let (a, b) = (owner("a"), owner("b"));
    let listings = Listings::default();
    assert!(!listings.freed_by_capms("m1", &a));
    listings.freed("m1", &a).await;
    assert!(listings.freed_by_capms("m1", &a));
    assert!(!listings.freed_by_capms("m2", &a));
    assert!(!listings.freed_by_capms("m1", &b), "freed for a, not for b");
    listings.record(CLUSTER_TAG, &allocated_for("m1", &b)).await;
    assert!(!listings.freed_by_capms("m1", &a), "allocated again");
}

/// The interleaving behind a machine leaked in a 10 × 100 run. capms frees machine m1 of
/// object a; its removal from the listings waits for each cluster's listing in turn, behind
/// finds in flight. Meanwhile metal-api reclaims m1 and capms allocates it for object b of
/// cluster c, recording it in c's listing. Then a's removal reaches c's listing. It must take
/// only a's allocation away: with b's gone from the listing, b (deleted next, its listing
/// fresh) was let go with m1 still allocated, and b alive would have allocated a second
/// machine.
#[tokio::test]
async fn a_free_reaching_a_listing_late_leaves_a_later_allocation_of_the_machine() {
    let (a, b) = (owner("a"), owner("b"));
    let listings = Listings::default();
    listed(&listings, vec![allocated_for("m1", &a)]).await;
    let other_cluster = listings.slot("cluster.metal-stack.io/id=ns.other");
    *other_cluster.listing.lock().await = Some(Snapshot {
        requested: Instant::now(),
        epoch: listings.epoch(&other_cluster),
        machines: Arc::default(),
    });
    // A find of the other cluster is in flight: its listing is held.
    let in_flight = other_cluster.listing.lock().await;
    let mut removal = std::pin::pin!(listings.freed("m1", &a));
    // a's removal runs until it waits for the held listing (which it may meet before or
    // after c's; either way c's listing must end up with b's allocation).
    assert!(futures::poll!(removal.as_mut()).is_pending());
    listings.record(CLUSTER_TAG, &allocated_for("m1", &b)).await;
    drop(in_flight);
    removal.await;
    let b_tags = allocated_for("m1", &b).tags;
    assert_eq!(shown(&listings).await, [("m1".to_owned(), b_tags)]);
    assert!(!listings.freed_by_capms("m1", &b), "b must ask metal-api");
    // And the same once the removal is simply late, after b's allocation is in.
    listings.freed("m1", &a).await;
    assert_eq!(shown(&listings).await.len(), 1, "still b's");
    listings.freed("m1", &b).await;
    assert!(shown(&listings).await.is_empty(), "b's own free takes it");
}

#[test]
fn a_v2_cluster_lists_as_often_as_on_v1_until_its_token_runs_low() {
    assert_eq!(v2_min_age(1.0), Duration::ZERO);
    assert_eq!(v2_min_age(0.26), Duration::ZERO);
    assert_eq!(v2_min_age(0.25), V2_MIN_AGE, "a quarter left");
    assert_eq!(v2_min_age(0.0), V2_MIN_AGE, "spent or paused");
}
