//! Defaults and validation rules, without a server.

use super::*;

// ---- defaults -----------------------------------------------------------------------------

#[test]
fn go_provider_clusters_serve_their_api_on_port_443() {
    let endpoint = |ip: Option<&str>, given: Option<ApiEndpoint>| {
        let mut spec = cluster_spec();
        spec.control_plane_ip = ip.map(str::to_owned);
        spec.control_plane_endpoint = given;
        default_go_provider_cluster(&mut spec);
        spec.control_plane_endpoint.expect("an endpoint")
    };
    let at = |host: Option<&str>, port: i32| ApiEndpoint {
        host: host.map(str::to_owned),
        port: Some(port),
    };
    assert_eq!(
        endpoint(Some("127.100.0.9"), None),
        at(Some("127.100.0.9"), 443)
    );
    assert_eq!(
        endpoint(None, None),
        at(None, 443),
        "on the IP capms allocates"
    );
    let given = at(Some("api.example.org"), 6443);
    assert_eq!(
        endpoint(Some("127.100.0.9"), Some(given.clone())),
        given,
        "kept"
    );
}

#[test]
fn defaults_port_protocol_and_partition() {
    let mut spec = cluster_spec();
    spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.9".into()),
        port: None,
    });
    spec.firewall_spec.as_mut().expect("fw").rules = Some(FirewallRules {
        egress: vec![EgressRule {
            ports: vec![443],
            to: vec!["0.0.0.0/0".into()],
            ..Default::default()
        }],
        ingress: vec![],
    });
    default_cluster(&mut spec);
    assert_eq!(
        spec.control_plane_endpoint.as_ref().and_then(|e| e.port),
        Some(6443)
    );
    let rules = spec
        .firewall_spec
        .as_ref()
        .and_then(|f| f.rules.clone())
        .expect("rules");
    assert_eq!(rules.egress[0].protocol, Some(crate::api::Protocol::Tcp));

    let mut explicit = cluster_spec();
    explicit.control_plane_endpoint = Some(ApiEndpoint {
        host: None,
        port: Some(443),
    });
    default_cluster(&mut explicit);
    assert_eq!(
        explicit.control_plane_endpoint.and_then(|e| e.port),
        Some(443),
        "an explicit port is kept"
    );

    let mut m = MetalStackMachineSpec {
        partition: None,
        ..machine_spec()
    };
    default_machine(&mut m, Some("mini-lab"));
    assert_eq!(m.partition.as_deref(), Some("mini-lab"));
    let mut m = MetalStackMachineSpec {
        partition: Some("other".into()),
        ..machine_spec()
    };
    default_machine(&mut m, Some("mini-lab"));
    assert_eq!(
        m.partition.as_deref(),
        Some("other"),
        "an explicit partition is kept"
    );
}

// ---- validation ---------------------------------------------------------------------------

#[test]
fn a_good_cluster_and_machine_pass() {
    let c = catalog();
    assert_eq!(
        errors_of(|r| validate_cluster(r, "spec", &cluster_spec(), None, Some(&c))),
        Vec::<String>::new()
    );
    assert_eq!(
        errors_of(|r| validate_machine(r, "spec", &machine_spec(), None, Some(&c), None)),
        Vec::<String>::new()
    );
    let short = MetalStackMachineSpec {
        image: "capms-ubuntu-1.33".into(),
        ..machine_spec()
    };
    assert!(
        errors_of(|r| validate_machine(r, "spec", &short, None, Some(&c), None)).is_empty(),
        "a shorter version resolves"
    );
}

#[test]
fn machine_errors_name_the_field_and_the_valid_choices() {
    let c = catalog();
    let bad = MetalStackMachineSpec {
        image: "ubuntu-99.4".into(),
        machine_type: "v1-huge".into(),
        partition: Some("mars".into()),
        ..machine_spec()
    };
    let errors = errors_of(|r| validate_machine(r, "spec", &bad, None, Some(&c), None));
    assert_eq!(errors.len(), 3, "every error at once: {errors:?}");
    assert!(
        errors[0].starts_with("spec.image: image \"ubuntu-99.4\" does not resolve"),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("valid machine images: capms-ubuntu-1.33.5, capms-ubuntu-1.34.1, debian-13.0, ubuntu-26.4"), "{}", errors[0]);
    assert_eq!(
        errors[1],
        "spec.machineType: machine type \"v1-huge\" is not a metal-stack size; valid: v1-small-x86"
    );
    assert_eq!(
        errors[2],
        "spec.partition: partition \"mars\" does not exist in metal-api; valid: mini-lab"
    );

    let firewall_image = MetalStackMachineSpec {
        image: "firewall-ubuntu-3.0".into(),
        ..machine_spec()
    };
    let errors = errors_of(|r| validate_machine(r, "spec", &firewall_image, None, Some(&c), None));
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("has features [firewall], not machine; valid machine images:"),
        "{}",
        errors[0]
    );
}

#[test]
fn cluster_errors_cover_project_networks_and_endpoint() {
    let mut state = lab();
    let private = private_network(&mut state);
    let c = state.catalog();
    let mut spec = cluster_spec();
    spec.public_network_id = Some("tenant-super-network-mini-lab".into());
    spec.project_id = "00000000-0000-0000-0000-0000000000ff".into();
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.projectID: project \"00000000-0000-0000-0000-0000000000ff\" does not exist"
        ) && e.contains("sample-project")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("spec.publicNetworkID: network \"tenant-super-network-mini-lab\" is not an external network") && e.contains("valid external networks: internet-mini-lab")),
        "{errors:?}"
    );

    let mut spec = cluster_spec();
    spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("10.9.9.9".into()),
        port: None,
    });
    spec.private_network_id = Some("internet-mini-lab".into());
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    assert!(
        errors.iter().any(|e| e
            .starts_with("spec.controlPlaneEndpoint.host: 10.9.9.9 is not in the public network")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.privateNetworkID: network \"internet-mini-lab\" is not a private network"
        ) && e.contains(&private)),
        "{errors:?}"
    );

    let mut good = cluster_spec();
    good.private_network_id = Some(private);
    good.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.9".into()),
        port: Some(6443),
    });
    assert!(errors_of(|r| validate_cluster(r, "spec", &good, None, Some(&c))).is_empty());
    // Another project's private network is not this cluster's.
    let mut foreign = good.clone();
    foreign.project_id = "00000000-0000-0000-0000-000000000002".into();
    let errors = errors_of(|r| validate_cluster(r, "spec", &foreign, None, Some(&c)));
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("spec.privateNetworkID: network")
                && e.contains(&format!("belongs to project \"{PROJECT}\""))),
        "{errors:?}"
    );
}

#[test]
fn firewall_rules_and_provider_ids_are_checked() {
    let state = lab();
    let c0 = state.catalog();
    let fw = MetalStackFirewallSpec {
        image: "ubuntu-26.4".into(),
        machine_type: "v1-small-x86".into(),
        rules: Some(FirewallRules {
            egress: vec![EgressRule {
                ports: vec![53],
                to: vec!["0.0.0.0/0".into(), "::/0".into()],
                ..Default::default()
            }],
            ingress: vec![],
        }),
        networks: vec!["nowhere".into()],
        provider_id: Some("metal://other/00000000-0000-0000-0000-000000000001".into()),
        ..Default::default()
    };
    let errors =
        errors_of(|r| validate_firewall(r, "spec", &fw, None, Some("mini-lab"), Some(&c0), None));
    for expected in [
        "spec.rules.egress[0].to: mixes IPv4 and IPv6",
        "spec.image: image \"ubuntu-26.4\" resolves to ubuntu-26.4 which has features [machine], not firewall; valid firewall images: firewall-ubuntu-3.0",
        "spec.networks[0]: network \"nowhere\" does not exist",
        "spec.providerID: names partition \"other\" but machine 00000000-0000-0000-0000-000000000001 is in partition \"mini-lab\"",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "missing {expected:?} in {errors:?}"
        );
    }
}

#[test]
fn a_preset_machine_is_admitted_only_for_the_object_it_is_allocated_to() {
    let mut state = lab();
    // A preset machine allocated to someone else is refused; to this very object it is fine.
    let net = private_network(&mut state);
    let marks = crate::ownership::owner_marks(OwnerKind::Firewall, "ns", "fw", "uid-1");
    let req = metal_api::types::MachineAllocateRequest {
        uuid: Some("00000000-0000-0000-0000-000000000002".into()),
        projectid: PROJECT.into(),
        imageid: "firewall-ubuntu-3.0".into(),
        networks: Some(vec![metal_api::types::AllocationNetwork {
            networkid: net,
            autoacquire: None,
        }]),
        tags: crate::ownership::owner_tags(&marks),
        ..Default::default()
    };
    state
        .machine_allocate(&req, None, "firewall", "test")
        .expect("allocated");
    let c = state.catalog();
    let fw = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        provider_id: Some("metalstack://00000000-0000-0000-0000-000000000002".into()),
        ..Default::default()
    };
    let errors = errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), None));
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.providerID: machine 00000000-0000-0000-0000-000000000002 is already allocated"
        )),
        "{errors:?}"
    );
    assert!(
        errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), Some(&marks)))
            .is_empty(),
        "its own machine"
    );
    // Moved or restored (same namespace and name, a new UID): still its own; another's: refused.
    let object = |name: &str, uid: &str| {
        let mut o = crate::api::MetalStackFirewall::new(name, fw.clone());
        o.metadata.namespace = Some("ns".into());
        o.metadata.uid = Some(uid.into());
        crate::ownership::identity_of(OwnerKind::Firewall, &o)
    };
    let moved = object("fw", "uid-after-move");
    assert!(
        errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), Some(&moved)))
            .is_empty(),
        "a moved firewall is admitted"
    );
    let other = object("other-fw", "uid-2");
    assert!(
        !errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), Some(&other)))
            .is_empty(),
        "another object's machine is refused"
    );
}

#[test]
fn immutability_after_allocation_and_of_templates() {
    let c = catalog();
    let old = cluster_spec();
    let mut new = cluster_spec();
    new.partition = "elsewhere".into();
    new.public_network_id = Some("other".into());
    let errors = errors_of(|r| validate_cluster(r, "spec", &new, Some(&old), None));
    assert!(
        errors.contains(&"spec.partition: is immutable once set".to_owned()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"spec.publicNetworkID: is immutable once set".to_owned()),
        "{errors:?}"
    );
    // capms itself fills an empty endpoint: allowed.
    let mut filled = cluster_spec();
    filled.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.1".into()),
        port: Some(6443),
    });
    assert!(errors_of(|r| validate_cluster(r, "spec", &filled, Some(&old), Some(&c))).is_empty());

    let unallocated = machine_spec();
    let mut allocated = machine_spec();
    allocated.provider_id = Some("metal://mini-lab/00000000-0000-0000-0000-000000000003".into());
    assert!(
        errors_of(|r| validate_machine(r, "spec", &allocated, Some(&unallocated), None, None))
            .is_empty(),
        "capms writes the providerID"
    );
    let mut changed = allocated.clone();
    changed.image = "debian-13.0".into();
    let errors = errors_of(|r| validate_machine(r, "spec", &changed, Some(&allocated), None, None));
    assert_eq!(
        errors,
        [
            "spec.image: is immutable once the machine is allocated; create a new MetalStackMachine instead"
        ]
    );

    let a = json!({"template": {"spec": {"image": "a"}}});
    let b = json!({"template": {"spec": {"image": "b"}}});
    assert_eq!(
        errors_of(|r| validate_template_update(r, &a, &b, false)).len(),
        1
    );
    assert!(
        errors_of(|r| validate_template_update(r, &a, &b, true)).is_empty(),
        "ClusterClass dry run"
    );
    assert!(errors_of(|r| validate_template_update(r, &a, &a, false)).is_empty());
}

#[test]
fn firewall_templates_name_no_machine_and_clusters_take_a_spec_or_a_template() {
    let c = catalog();
    let good = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    };
    assert_eq!(
        errors_of(|r| validate_firewall_template(r, "spec.template.spec", &good, Some(&c))),
        Vec::<String>::new()
    );
    let pinned = MetalStackFirewallSpec {
        provider_id: Some("metal://mini-lab/00000000-0000-0000-0000-0000000000f1".into()),
        image: "nope".into(),
        ..good.clone()
    };
    let errors =
        errors_of(|r| validate_firewall_template(r, "spec.template.spec", &pinned, Some(&c)));
    assert!(
        errors[0].starts_with("spec.template.spec.providerID: a template cannot name a machine"),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("spec.template.spec.image: image \"nope\"")),
        "the firewall rules apply to the template's spec too: {errors:?}"
    );

    let mut both = cluster_spec();
    both.firewall_template_ref = Some(crate::api::LocalObjectReference {
        name: "edge".into(),
    });
    let errors = errors_of(|r| validate_cluster(r, "spec", &both, None, Some(&c)));
    assert_eq!(
        errors,
        [
            "spec.firewallTemplateRef: set at most one of firewallSpec (the firewall inline), firewallTemplateRef (a MetalStackFirewallTemplate) and firewallDeploymentRef (a MetalStackFirewallDeployment)"
        ]
    );
    both.firewall_spec = None;
    assert_eq!(
        errors_of(|r| validate_cluster(r, "spec", &both, None, Some(&c))),
        Vec::<String>::new()
    );
}

#[test]
fn a_firewall_goes_only_into_external_networks_and_its_cluster_s_own_private_ones() {
    let mut state = lab();
    let own = private_network(&mut state);
    let mut c = state.catalog();
    let mut foreign = c
        .networks
        .iter()
        .find(|n| n.id == own)
        .cloned()
        .expect("the private network");
    foreign.id = "someone-else".into();
    foreign.projectid = "00000000-0000-0000-0000-00000000000f".into();
    c.networks.push(foreign);
    let mut spec = cluster_spec();
    spec.private_network_id = Some(own.clone());
    let networks = [
        "internet-mini-lab",
        own.as_str(),
        "underlay-mini-lab",
        "tenant-super-network-mini-lab",
        "someone-else",
    ];
    if let Some(fw) = spec.firewall_spec.as_mut() {
        fw.networks = networks.map(str::to_owned).to_vec();
    }
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    let paths: Vec<&str> = errors.iter().filter_map(|e| e.split(':').next()).collect();
    assert_eq!(
        paths,
        [
            "spec.firewallSpec.networks[2]",
            "spec.firewallSpec.networks[3]",
            "spec.firewallSpec.networks[4]"
        ],
        "{errors:?}"
    );
    assert!(errors[2].contains("is a private network of project \"00000000-0000-0000-0000-00000000000f\", not of the cluster's project"), "{errors:?}");
    let choices = "valid external networks: internet-mini-lab; valid shared private networks: none (capms adds the cluster's own private network itself)";
    assert!(errors.iter().all(|e| e.ends_with(choices)), "{errors:?}");

    // Another private network of the project: metal-api would refuse a second one.
    spec.private_network_id = None;
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    assert!(
        errors[0].starts_with(&format!("spec.firewallSpec.networks[1]: network {own:?} is a private network of the project but not the cluster's own")),
        "{errors:?}"
    );

    // The same rule names the cluster when the networks are a template's.
    let errors = errors_of(|r| {
        check_firewall_networks(
            r,
            "spec.template.spec.networks",
            &["underlay-mini-lab".to_owned()],
            (&spec, None),
            "; MetalStackCluster team-a/c1 uses this template",
            &c,
        )
    });
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("spec.template.spec.networks[0]: network \"underlay-mini-lab\" is an underlay network, which metal-api adds to every firewall itself; MetalStackCluster team-a/c1 uses this template; valid external networks"),
        "{errors:?}"
    );
}
