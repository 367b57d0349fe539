//! Unit tests of the allocation and network rules.

use super::*;
use metal_api::tags::MACHINE_ID;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

fn lab() -> State {
    State::from_inventory(&Inventory::default_lab()).expect("inventory")
}

fn child(state: &mut State, shared: bool) -> String {
    let req = NetworkAllocateRequest {
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        shared,
        ..Default::default()
    };
    state.network_allocate(&req).expect("network").id
}

fn nets(ids: &[&str]) -> Vec<AllocationNetwork> {
    ids.iter()
        .map(|id| AllocationNetwork {
            networkid: (*id).into(),
            autoacquire: None,
        })
        .collect()
}

#[test]
fn tags_deduplicate_by_key_and_system_tags_win() {
    let user = [
        "a=1".to_owned(),
        "a=2".to_owned(),
        "plain".to_owned(),
        "machine.metal-stack.io/rack=mine".to_owned(),
    ];
    let system = ["machine.metal-stack.io/rack=rack-1".to_owned()];
    let merged = merge_tags(&user, &system);
    assert_eq!(
        merged,
        ["a=2", "machine.metal-stack.io/rack=rack-1", "plain"]
    );
}

#[test]
fn firewall_rules_are_validated_like_metal_api() {
    let egress = |to: &[&str], comment: &str| FirewallRules {
        egress: vec![FirewallEgressRule {
            protocol: "tcp".into(),
            ports: vec![443],
            to: to.iter().map(|s| (*s).to_owned()).collect(),
            comment: comment.into(),
        }],
        ingress: vec![],
    };
    assert!(validate_firewall_rules(&egress(&["0.0.0.0/0"], "allow https")).is_ok());
    let mixed =
        validate_firewall_rules(&egress(&["0.0.0.0/0", "::/0"], "")).expect_err("mixed families");
    assert_eq!(mixed.status, 400);
    let digits = validate_firewall_rules(&egress(&["0.0.0.0/0"], "port 443")).expect_err("digits");
    assert!(
        digits.message.contains("illegal character"),
        "{}",
        digits.message
    );
    assert!(validate_firewall_rules(&egress(&["not-a-cidr"], "")).is_err());
}

#[test]
fn shared_private_networks_follow_the_primary_rules() {
    let mut state = lab();
    let unshared = child(&mut state, false);
    let shared_a = child(&mut state, true);
    let shared_b = child(&mut state, true);
    let plan = state
        .gather_networks(&nets(&[&shared_a]), &[], "mini-lab", PROJECT, ROLE_MACHINE)
        .expect("one shared");
    assert_eq!(plan[0].1, machine_network_type::PRIVATE_PRIMARY_SHARED);
    let err = state
        .gather_networks(
            &nets(&[&unshared, &shared_a]),
            &[],
            "mini-lab",
            PROJECT,
            ROLE_MACHINE,
        )
        .expect_err("machine");
    assert_eq!(
        err.message,
        "machines are not allowed to be placed into multiple private networks"
    );
    let plan = state
        .gather_networks(
            &nets(&[&unshared, &shared_a]),
            &[],
            "mini-lab",
            PROJECT,
            ROLE_FIREWALL,
        )
        .expect("firewall may have a secondary shared network");
    let kinds: Vec<_> = plan.iter().map(|p| p.1).collect();
    assert_eq!(
        kinds,
        [
            "privateprimaryunshared",
            "privatesecondaryshared",
            "underlay"
        ]
    );
    let err = state
        .gather_networks(
            &nets(&[&shared_a, &shared_b]),
            &[],
            "mini-lab",
            PROJECT,
            ROLE_FIREWALL,
        )
        .expect_err("two shared");
    assert!(
        err.message
            .starts_with("multiple private networks are specified"),
        "{}",
        err.message
    );
    let err = state
        .gather_networks(
            &nets(&[&unshared, &unshared]),
            &[],
            "mini-lab",
            PROJECT,
            ROLE_MACHINE,
        )
        .expect_err("dup");
    assert_eq!(err.message, "given network ids are not unique");
    let err = state
        .gather_networks(
            &nets(&[&unshared]),
            &[],
            "mini-lab",
            "00000000-0000-0000-0000-00000000000f",
            ROLE_MACHINE,
        )
        .expect_err("foreign project");
    assert_eq!(
        err.message,
        "the given private network does not belong to the project, which is not allowed"
    );
}

#[test]
fn freed_machines_release_ephemeral_ips_and_keep_static_ones() {
    let mut state = lab();
    let net = child(&mut state, false);
    let req = MachineAllocateRequest {
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: "debian-13.0".into(),
        networks: Some(nets(&[&net, "internet-mini-lab"])),
        ips: vec!["127.100.0.142".into()],
        ..Default::default()
    };
    let m = state
        .machine_allocate(&req, None, ROLE_MACHINE, "test")
        .expect("allocated");
    let tag = format!("{MACHINE_ID}={}", m.id);
    assert!(
        state.ips["127.100.0.142"].tags.contains(&tag),
        "a supplied IP gets machine scope"
    );
    let (_, was_allocated) = state.machine_free(&m.id).expect("freed");
    assert!(was_allocated);
    state.release_machine_ips(&m.id);
    assert!(
        !state.ips["127.100.0.142"].has_machine_scope(),
        "static IP kept, back in project scope"
    );
    assert!(state.ips.values().all(|ip| !ip.tags.contains(&tag)));
    assert!(
        state.network_free(&net).is_ok(),
        "the private network is empty again"
    );
}
