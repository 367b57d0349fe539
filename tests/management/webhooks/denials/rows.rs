//! The table: every denial, by kind, with what it says.

use super::*;

/// MetalStackMachines made or changed by hand, also with Cluster API's clone annotation where
/// it exempts nothing.
pub(super) fn machine_rows() -> Vec<Value> {
    let other = |image: &str| json!({"image": image, "machineType": "c1-xlarge-x86"});
    let allocated = on(
        small("ubuntu-26.4"),
        &format!("metal://mini-lab/{}", mid(1)),
    );
    let replica = cloned_from(MACHINE_TEMPLATE);
    vec![
        json!({"what": "an image metal-api cannot resolve", "kind": "MetalStackMachine", "name": "m-image", "spec": small("ubuntu-99.04"),
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        json!({"what": "a firewall image", "kind": "MetalStackMachine", "name": "m-firewall-image", "spec": small("firewall-ubuntu-3.0"),
               "says": [format!("spec.image: image \"firewall-ubuntu-3.0\" resolves to firewall-ubuntu-3.0 which has features [firewall], not machine; {MACHINE_IMAGES}")]}),
        json!({"what": "a machine type that is no size", "kind": "MetalStackMachine", "name": "m-size", "spec": other("ubuntu-26.4"),
               "says": [format!("spec.machineType: {NO_SIZE}")]}),
        json!({"what": "a partition metal-api lacks", "kind": "MetalStackMachine", "name": "m-partition", "spec": with(small("ubuntu-26.4"), json!({"partition": "vagrant"})),
               "says": [format!("spec.partition: {NO_PARTITION}")]}),
        json!({"what": "the Go provider's field names, in v1alpha1", "kind": "MetalStackMachine", "apiVersion": V1ALPHA1, "name": "go-m-size", "spec": {"image": "ubuntu-26.4", "size": "c1-xlarge-x86"},
               "says": [format!("spec.size: {NO_SIZE}")]}),
        json!({"what": "a providerID of a machine metal-api lacks", "kind": "MetalStackMachine", "name": "m-pid-missing", "spec": on(small("ubuntu-26.4"), &pid(99)),
               "says": [format!("spec.providerID: machine {} does not exist in metal-api", mid(99))]}),
        json!({"what": "a providerID naming another partition than its machine's", "kind": "MetalStackMachine", "name": "m-pid-partition", "spec": on(small("ubuntu-26.4"), &format!("metal://vagrant/{}", mid(4))),
               "says": [format!("spec.providerID: names partition \"vagrant\" but machine {} is in partition \"mini-lab\"", mid(4))]}),
        json!({"what": "a providerID outside spec.partition", "kind": "MetalStackMachine", "name": "m-pid-outside", "spec": on(with(small("ubuntu-26.4"), json!({"partition": "vagrant"})), &pid(4)),
               "says": [format!("spec.providerID: machine {} is in partition \"mini-lab\", not in \"vagrant\"", mid(4)), format!("spec.partition: {NO_PARTITION}")]}),
        json!({"what": "a providerID of a machine of another size", "kind": "MetalStackMachine", "name": "m-pid-size", "spec": on(other("ubuntu-26.4"), &pid(4)),
               "says": [format!("spec.providerID: machine {} has size \"v1-small-x86\", not the requested machine type \"c1-xlarge-x86\"", mid(4)), format!("spec.machineType: {NO_SIZE}")]}),
        json!({"what": "a providerID of a machine allocated to someone else", "kind": "MetalStackMachine", "name": "m-pid-taken", "spec": on(small("ubuntu-26.4"), &pid(6)),
               "says": [taken("spec.providerID")]}),
        json!({"what": "a field that does not fit, and a providerID of neither form", "kind": "MetalStackMachine", "name": "m-misfit",
               "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86", "sshKeys": "ssh-ed25519 AAAA", "providerID": "metalstack://not-a-uuid"},
               "says": ["spec.sshKeys: invalid type: string \"ssh-ed25519 AAAA\", expected a sequence", "spec.providerID: \"metalstack://not-a-uuid\" is neither metalstack://<uuid> nor metal://<partition>/<uuid>"]}),
        json!({"what": "no image", "kind": "MetalStackMachine", "name": "m-no-image", "spec": {"machineType": "v1-small-x86"},
               "says": ["spec.image: is required"]}),
        json!({"what": "an allocated machine's image", "kind": "MetalStackMachine", "name": "mu-image", "spec": allocated, "patch": {"image": "debian-13.0"},
               "says": [format!("spec.image: {IMMUTABLE_MACHINE}")]}),
        json!({"what": "an allocated machine's machine type", "kind": "MetalStackMachine", "name": "mu-type", "spec": allocated, "patch": {"machineType": "c1-xlarge-x86"},
               "says": [format!("spec.machineType: {IMMUTABLE_MACHINE}")]}),
        json!({"what": "an allocated machine's partition, set late (CEL lets an unset one be set)", "kind": "MetalStackMachine", "name": "mu-partition", "spec": allocated, "patch": {"partition": "mini-lab"},
               "says": [format!("spec.partition: {IMMUTABLE_MACHINE}")]}),
        json!({"what": "a made-by-hand clone annotation of another kind", "kind": "MetalStackMachine", "name": "m-cloned-other-kind", "spec": small("ubuntu-99.04"),
               "annotations": cloned_from("MetalStackClusterTemplate.infrastructure.cluster.x-k8s.io"),
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        json!({"what": "a made-by-hand clone annotation of another group", "kind": "MetalStackMachine", "name": "m-cloned-other-group", "spec": small("ubuntu-99.04"),
               "annotations": cloned_from("MetalStackMachineTemplate.example.com"),
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        // Only the creation of a template's replica skips the webhooks, not a person's change.
        json!({"what": "a person's change to a template's replica", "kind": "MetalStackMachine", "name": "mu-replica", "annotations": replica, "spec": small("ubuntu-26.4"), "patch": {"image": "ubuntu-99.04"},
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
    ]
}

/// MetalStackFirewalls, and MetalStackFirewallTemplates against the clusters using them.
pub(super) fn firewall_rows(lab: &Lab) -> Vec<Value> {
    let allocated = fw(json!({"providerID": pid(2)}));
    let mixed = json!({"egress": [{"ports": [443], "to": ["not-a-cidr"]}], "ingress": [{"ports": [22], "from": ["0.0.0.0/0"], "to": ["::/0"]}]});
    let misfit = json!({"egress": [{"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]}, {"ports": [70000], "to": ["0.0.0.0/0"]}]});
    let used_by = |cluster: &str| {
        format!(
            "spec.template.spec.networks[1]: {UNDERLAY}; MetalStackCluster {}/{cluster} uses this template, and its firewall could not be allocated; {EXTERNAL}",
            lab.ns
        )
    };
    let networks = json!(["internet-mini-lab", "underlay-mini-lab"]);
    let sctp = json!({"ingress": [{"protocol": "sctp", "ports": [22], "from": ["0.0.0.0/0"]}]});
    vec![
        json!({"what": "a machine image", "kind": "MetalStackFirewall", "name": "f-image", "spec": fw(json!({"image": "ubuntu-26.4"})),
               "says": [format!("spec.image: image \"ubuntu-26.4\" resolves to ubuntu-26.4 which has features [machine], not firewall; {FIREWALL_IMAGES}")]}),
        json!({"what": "an image, a size and a network metal-api lacks", "kind": "MetalStackFirewall", "name": "f-catalog",
               "spec": fw(json!({"image": "firewall-ubuntu-9.9", "machineType": "c1-xlarge-x86", "networks": ["nope"]})),
               "says": ["spec.image: image \"firewall-ubuntu-9.9\" does not resolve to any image in metal-api", FIREWALL_IMAGES, format!("spec.machineType: {NO_SIZE}"), "spec.networks[0]: network \"nope\" does not exist in metal-api"]}),
        json!({"what": "a destination that is no CIDR, and a rule of both address families", "kind": "MetalStackFirewall", "name": "f-cidrs", "spec": fw(json!({"rules": mixed})),
               "says": ["spec.rules.egress[0].to: \"not-a-cidr\" is not a CIDR (", "write CIDRs such as 10.0.0.0/8 or 2001:db8::/32", "spec.rules.ingress[0]: mixes IPv4 and IPv6 CIDRs; metal-api needs one address family per rule"]}),
        json!({"what": "a protocol that does not fit, and a port out of range", "kind": "MetalStackFirewall", "name": "f-misfit", "spec": fw(json!({"rules": misfit})),
               "says": ["spec.rules.egress[0].protocol: unknown variant `icmp`, expected `tcp` or `udp`", "spec.rules.egress[1].ports[0]: port 70000 does not exist; valid: 0 to 65535"]}),
        json!({"what": "a providerID of a machine allocated to someone else", "kind": "MetalStackFirewall", "name": "f-pid-taken", "spec": fw(json!({"providerID": pid(6)})),
               "says": [taken("spec.providerID")]}),
        json!({"what": "an allocated firewall's providerID", "kind": "MetalStackFirewall", "name": "fu-pid", "spec": allocated, "patch": {"providerID": pid(3)},
               "says": ["spec.providerID: is immutable once set"]}),
        json!({"what": "an allocated firewall's image", "kind": "MetalStackFirewall", "name": "fu-image", "spec": allocated, "patch": {"image": "firewall-ubuntu-3"},
               "says": [format!("spec.image: {FIREWALL_ALLOCATED}")]}),
        json!({"what": "a machine image", "kind": "MetalStackFirewallTemplate", "name": "ft-image", "spec": tmpl(fw(json!({"image": "ubuntu-26.4"}))),
               "says": [format!("spec.template.spec.image: image \"ubuntu-26.4\" resolves to ubuntu-26.4 which has features [machine], not firewall; {FIREWALL_IMAGES}")]}),
        json!({"what": "a size and a network metal-api lacks", "kind": "MetalStackFirewallTemplate", "name": "ft-catalog", "spec": tmpl(fw(json!({"machineType": "c1-xlarge-x86", "networks": ["nope"]}))),
               "says": [format!("spec.template.spec.machineType: {NO_SIZE}"), "spec.template.spec.networks[0]: network \"nope\" does not exist in metal-api"]}),
        json!({"what": "a rule of both address families", "kind": "MetalStackFirewallTemplate", "name": "ft-families", "spec": tmpl(fw(json!({"rules": {"ingress": [{"ports": [22], "from": ["0.0.0.0/0", "::/0"]}]}}))),
               "says": ["spec.template.spec.rules.ingress[0]: mixes IPv4 and IPv6 CIDRs; metal-api needs one address family per rule"]}),
        json!({"what": "a protocol that does not fit, and a machine named", "kind": "MetalStackFirewallTemplate", "name": "ft-misfit", "spec": tmpl(fw(json!({"providerID": pid(5), "rules": sctp}))),
               "says": ["spec.template.spec.rules.ingress[0].protocol: unknown variant `sctp`, expected `tcp` or `udp`",
                        "spec.template.spec.providerID: a template cannot name a machine: every firewall made from it would claim the same one; remove providerID, or use a MetalStackCluster's firewallSpec for one firewall on that machine"]}),
        json!({"what": "networks a cluster using it could not get", "kind": "MetalStackFirewallTemplate", "name": "fwt-used-a", "spec": tmpl(fw(json!({"networks": networks}))),
               "says": [used_by("fwt-user-a")]}),
        json!({"what": "a change into networks a cluster using it could not get", "kind": "MetalStackFirewallTemplate", "name": "fwt-used-b", "spec": tmpl(fw(json!({"networks": ["internet-mini-lab"]}))),
               "patch": {"template": {"spec": {"networks": networks}}}, "says": [used_by("fwt-user-b")]}),
    ]
}

pub(super) fn cluster_rows(lab: &Lab) -> Vec<Value> {
    let p = &lab.private;
    let private = format!("valid private networks of the project: {p}");
    let rules = json!({"egress": [{"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]}, {"protocol": "tcp", "ports": [70000], "to": ["0.0.0.0/0"]}]});
    vec![
        json!({"what": "a partition metal-api lacks", "kind": "MetalStackCluster", "name": "c-partition", "spec": cl(json!({"partition": "vagrant"})),
               "says": [format!("spec.partition: {NO_PARTITION}")]}),
        json!({"what": "a project metal-api lacks", "kind": "MetalStackCluster", "name": "c-project", "spec": cl(json!({"projectID": NO_PROJECT})),
               "says": [no_project("spec.projectID")]}),
        json!({"what": "a public network metal-api lacks", "kind": "MetalStackCluster", "name": "c-public-missing", "spec": cl(json!({"publicNetworkID": "nope"})),
               "says": [format!("spec.publicNetworkID: network \"nope\" does not exist in metal-api; {EXTERNAL}")]}),
        json!({"what": "an underlay as public network", "kind": "MetalStackCluster", "name": "c-public-underlay", "spec": cl(json!({"publicNetworkID": "underlay-mini-lab"})),
               "says": [format!("spec.publicNetworkID: network \"underlay-mini-lab\" is not an external network (it is an underlay); {EXTERNAL}")]}),
        json!({"what": "a private network as public network, in v1alpha3", "kind": "MetalStackCluster", "apiVersion": V1ALPHA3, "name": "c-public-private", "spec": cl(json!({"publicNetworkID": "tenant-super-network-mini-lab"})),
               "says": [format!("spec.publicNetworkID: network \"tenant-super-network-mini-lab\" is not an external network (it is private); {EXTERNAL}")]}),
        json!({"what": "a control-plane host outside the public network", "kind": "MetalStackCluster", "name": "c-host", "spec": cl(json!({"controlPlaneEndpoint": {"host": "127.200.0.1"}})),
               "says": ["spec.controlPlaneEndpoint.host: 127.200.0.1 is not in the public network \"internet-mini-lab\" (prefixes 127.100.0.0/24); use an address of it, or leave host empty to have capms allocate one"]}),
        json!({"what": "a private network metal-api lacks", "kind": "MetalStackCluster", "name": "c-private-missing", "spec": cl(json!({"privateNetworkID": "nope"})),
               "says": [format!("spec.privateNetworkID: network \"nope\" does not exist in metal-api; {private}")]}),
        json!({"what": "an external network as private network", "kind": "MetalStackCluster", "name": "c-private-external", "spec": cl(json!({"privateNetworkID": "internet-mini-lab"})),
               "says": [format!("spec.privateNetworkID: network \"internet-mini-lab\" is not a private network; {private}")]}),
        json!({"what": "another project's private network", "kind": "MetalStackCluster", "name": "c-private-other-project", "spec": cl(json!({"projectID": NO_PROJECT, "privateNetworkID": p})),
               "says": [format!("spec.privateNetworkID: network \"{p}\" belongs to project \"{PROJECT}\" in partition \"mini-lab\"; valid private networks of the project: none"), no_project("spec.projectID")]}),
        json!({"what": "the Go provider's field names, in v1alpha1", "kind": "MetalStackCluster", "apiVersion": V1ALPHA1, "name": "go-c-network",
               "spec": {"partition": "mini-lab", "projectID": PROJECT, "nodeNetworkID": "nope", "controlPlaneIP": "127.100.0.142"},
               "says": [format!("spec.nodeNetworkID: network \"nope\" does not exist in metal-api; {private}")]}),
        json!({"what": "fields that do not fit, and what the rules say of the rest", "kind": "MetalStackCluster", "name": "c-misfit", "spec": cl(json!({"projectID": "no-such-project", "firewallSpec": fw(json!({"rules": rules}))})),
               "says": ["spec.firewallSpec.rules.egress[0].protocol: unknown variant `icmp`, expected `tcp` or `udp`", "spec.firewallSpec.rules.egress[1].ports[0]: port 70000 does not exist; valid: 0 to 65535", "spec.projectID: project \"no-such-project\" does not exist in metal-api"]}),
        json!({"what": "a field that does not fit, and two firewall sources", "kind": "MetalStackCluster", "name": "c-two-firewalls", "spec": cl(json!({"controlPlaneIP": 5, "firewallSpec": fw(json!({})), "firewallTemplateRef": {"name": "nowhere"}})),
               "says": ["spec.controlPlaneIP: invalid type: integer `5`, expected a string", "spec.firewallTemplateRef: set at most one of firewallSpec (the firewall inline), firewallTemplateRef (a MetalStackFirewallTemplate) and firewallDeploymentRef (a MetalStackFirewallDeployment)"]}),
    ]
}

/// A cluster's firewall, inline or from a template it newly names; then the fields fixed once
/// set (partition and projectID: see the top of the file).
pub(super) fn cluster_firewall_and_update_rows(lab: &Lab) -> Vec<Value> {
    let p = &lab.private;
    let firewall = |extra: Value| cl(json!({"firewallSpec": fw(extra)}));
    let on_3 = fw(json!({"providerID": format!("metal://mini-lab/{}", mid(3))}));
    let allocated = cl(json!({"firewallSpec": on_3}));
    let host = |host: &str| cl(json!({"controlPlaneEndpoint": {"host": host}}));
    vec![
        json!({"what": "a machine image, a size and a network metal-api lacks", "kind": "MetalStackCluster", "name": "cf-catalog", "spec": firewall(json!({"image": "ubuntu-26.4", "machineType": "c1-xlarge-x86", "networks": ["nope"]})),
               "says": [format!("spec.firewallSpec.image: image \"ubuntu-26.4\" resolves to ubuntu-26.4 which has features [machine], not firewall; {FIREWALL_IMAGES}"), format!("spec.firewallSpec.machineType: {NO_SIZE}"), "spec.firewallSpec.networks[0]: network \"nope\" does not exist in metal-api"]}),
        json!({"what": "the underlay", "kind": "MetalStackCluster", "name": "cf-underlay", "spec": firewall(json!({"networks": ["underlay-mini-lab"]})),
               "says": [format!("spec.firewallSpec.networks[0]: {UNDERLAY}; {FIREWALL_NETWORKS}")]}),
        json!({"what": "the private super network", "kind": "MetalStackCluster", "name": "cf-super", "spec": firewall(json!({"networks": ["tenant-super-network-mini-lab"]})),
               "says": [format!("spec.firewallSpec.networks[0]: network \"tenant-super-network-mini-lab\" is a private super network, which no machine is placed into; {FIREWALL_NETWORKS}")]}),
        json!({"what": "a private network of another partition", "kind": "MetalStackCluster", "name": "cf-other-partition", "spec": cl(json!({"partition": "vagrant", "firewallSpec": fw(json!({"networks": [p]}))})),
               "says": [format!("spec.firewallSpec.networks[0]: network \"{p}\" is a private network in partition \"mini-lab\", not in the cluster's partition \"vagrant\""), format!("spec.partition: {NO_PARTITION}")]}),
        json!({"what": "another project's private network", "kind": "MetalStackCluster", "name": "cf-other-project", "spec": cl(json!({"projectID": NO_PROJECT, "firewallSpec": fw(json!({"networks": [p]}))})),
               "says": [format!("spec.firewallSpec.networks[0]: network \"{p}\" is a private network of project \"{PROJECT}\", not of the cluster's project \"{NO_PROJECT}\"; {FIREWALL_NETWORKS}")]}),
        json!({"what": "a private network of the project that is not the cluster's own", "kind": "MetalStackCluster", "name": "cf-not-own", "spec": firewall(json!({"networks": [p]})),
               "says": [format!("spec.firewallSpec.networks[0]: network \"{p}\" is a private network of the project but not the cluster's own, which capms adds to the firewall itself; metal-api places a machine into one private network that is not shared; {FIREWALL_NETWORKS}")]}),
        json!({"what": "a machine metal-api lacks", "kind": "MetalStackCluster", "name": "cf-pid", "spec": firewall(json!({"providerID": pid(99)})),
               "says": [format!("spec.firewallSpec.providerID: machine {} does not exist in metal-api", mid(99))]}),
        json!({"what": "a template whose networks the cluster could not get", "kind": "MetalStackCluster", "name": "cf-template", "spec": cl(json!({"firewallTemplateRef": {"name": "denials-underlay"}})),
               "says": [format!("spec.firewallTemplateRef: MetalStackFirewallTemplate denials-underlay: spec.template.spec.networks[1]: {UNDERLAY}")]}),
        json!({"what": "the public network", "kind": "MetalStackCluster", "name": "cu-public", "spec": cl(json!({})), "patch": {"publicNetworkID": null},
               "says": ["spec.publicNetworkID: is immutable once set"]}),
        json!({"what": "the private network", "kind": "MetalStackCluster", "name": "cu-private", "spec": cl(json!({"privateNetworkID": lab.private})), "patch": {"privateNetworkID": null},
               "says": ["spec.privateNetworkID: is immutable once set"]}),
        json!({"what": "the control-plane host", "kind": "MetalStackCluster", "name": "cu-host", "spec": host("127.100.0.20"), "patch": {"controlPlaneEndpoint": {"host": "127.100.0.21"}},
               "says": ["spec.controlPlaneEndpoint.host: is immutable once set"]}),
        json!({"what": "the control-plane port, defaulted to 6443", "kind": "MetalStackCluster", "name": "cu-port", "spec": host("127.100.0.22"), "patch": {"controlPlaneEndpoint": {"port": 7443}},
               "says": ["spec.controlPlaneEndpoint.port: is immutable once set"]}),
        json!({"what": "the machine of a firewall on a named machine", "kind": "MetalStackCluster", "name": "cu-firewall-pid", "spec": allocated, "patch": {"firewallSpec": {"providerID": format!("metal://mini-lab/{}", mid(4))}},
               "says": ["spec.firewallSpec.providerID: is immutable once set"]}),
        json!({"what": "the image of a firewall on a named machine", "kind": "MetalStackCluster", "name": "cu-firewall-image", "spec": allocated, "patch": {"firewallSpec": {"image": "firewall-ubuntu-3"}},
               "says": [format!("spec.firewallSpec.image: {FIREWALL_ALLOCATED}")]}),
    ]
}

/// MetalStackClusterTemplates and MetalStackMachineTemplates: checked like their objects, and
/// immutable.
pub(super) fn template_rows(lab: &Lab) -> Vec<Value> {
    let private = format!("valid private networks of the project: {}", lab.private);
    let firewall = fw(json!({"image": "firewall-ubuntu-9.9", "networks": ["underlay-mini-lab"]}));
    let change = json!({"template": {"spec": {"image": "debian-13.0"}}});
    vec![
        json!({"what": "a partition metal-api lacks", "kind": "MetalStackClusterTemplate", "name": "ct-partition", "spec": tmpl(cl(json!({"partition": "vagrant"}))),
               "says": [format!("spec.template.spec.partition: {NO_PARTITION}")]}),
        json!({"what": "a project metal-api lacks, and an underlay as public network", "kind": "MetalStackClusterTemplate", "name": "ct-project", "spec": tmpl(cl(json!({"projectID": NO_PROJECT, "publicNetworkID": "underlay-mini-lab"}))),
               "says": [no_project("spec.template.spec.projectID"), format!("spec.template.spec.publicNetworkID: network \"underlay-mini-lab\" is not an external network (it is an underlay); {EXTERNAL}")]}),
        json!({"what": "a firewall image metal-api cannot resolve, in the underlay", "kind": "MetalStackClusterTemplate", "name": "ct-firewall", "spec": tmpl(cl(json!({"firewallSpec": firewall}))),
               "says": ["spec.template.spec.firewallSpec.image: image \"firewall-ubuntu-9.9\" does not resolve to any image in metal-api", FIREWALL_IMAGES, format!("spec.template.spec.firewallSpec.networks[0]: {UNDERLAY}")]}),
        json!({"what": "a field that does not fit, and a private network metal-api lacks", "kind": "MetalStackClusterTemplate", "name": "ct-misfit", "spec": tmpl(cl(json!({"controlPlaneIP": 5, "privateNetworkID": "nope"}))),
               "says": ["spec.template.spec.controlPlaneIP: invalid type: integer `5`, expected a string", format!("spec.template.spec.privateNetworkID: network \"nope\" does not exist in metal-api; {private}")]}),
        json!({"what": "any change", "kind": "MetalStackClusterTemplate", "name": "ctu-immutable", "spec": tmpl(cl(json!({}))), "patch": {"template": {"spec": {"publicNetworkID": null}}},
               "says": [IMMUTABLE_TEMPLATE]}),
        json!({"what": "an image metal-api cannot resolve", "kind": "MetalStackMachineTemplate", "name": "mt-image", "spec": tmpl(small("ubuntu-99.04")),
               "says": ["spec.template.spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        json!({"what": "a firewall image", "kind": "MetalStackMachineTemplate", "name": "mt-firewall-image", "spec": tmpl(small("firewall-ubuntu-3.0")),
               "says": [format!("spec.template.spec.image: image \"firewall-ubuntu-3.0\" resolves to firewall-ubuntu-3.0 which has features [firewall], not machine; {MACHINE_IMAGES}")]}),
        json!({"what": "a size and a partition metal-api lacks", "kind": "MetalStackMachineTemplate", "name": "mt-size", "spec": tmpl(json!({"image": "ubuntu-26.4", "machineType": "c1-xlarge-x86", "partition": "vagrant"})),
               "says": [format!("spec.template.spec.machineType: {NO_SIZE}"), format!("spec.template.spec.partition: {NO_PARTITION}")]}),
        json!({"what": "a providerID of a machine metal-api lacks", "kind": "MetalStackMachineTemplate", "name": "mt-pid", "spec": tmpl(on(small("ubuntu-26.4"), &pid(99))),
               "says": [format!("spec.template.spec.providerID: machine {} does not exist in metal-api", mid(99))]}),
        json!({"what": "the Go provider's field names, in v1alpha1", "kind": "MetalStackMachineTemplate", "apiVersion": V1ALPHA1, "name": "go-mt-size", "spec": tmpl(json!({"image": "ubuntu-26.4", "size": "c1-xlarge-x86"})),
               "says": [format!("spec.template.spec.size: {NO_SIZE}")]}),
        json!({"what": "any change", "kind": "MetalStackMachineTemplate", "name": "mtu-immutable", "spec": tmpl(small("ubuntu-26.4")), "patch": change,
               "says": [IMMUTABLE_TEMPLATE]}),
        // ClusterClass's annotation exempts its dry runs only.
        json!({"what": "a change carrying ClusterClass's dry-run annotation, not in a dry run", "kind": "MetalStackMachineTemplate", "name": "mtu-dry-run-annotation",
               "annotations": {"topology.cluster.x-k8s.io/dry-run": ""}, "spec": tmpl(small("ubuntu-26.4")), "patch": change, "says": [IMMUTABLE_TEMPLATE]}),
    ]
}
