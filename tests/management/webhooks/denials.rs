//! Bad input is unaffected by the webhook configurations' `matchConditions`: every denial a
//! person (the admin user, not the manager's) got from capms's webhooks through kubectl, they
//! still get, naming the same field and the same valid choices. The webhooks are registered as
//! installed, with a manager user of their own whose updates skip admission. The table below is
//! that list; the one intended change closes it: a MetalStackMachine Cluster API clones from a
//! MetalStackMachineTemplate is admitted unchecked and undefaulted.

// Denial sites no person can reach through kubectl, so not in the table:
// - mod.rs: "malformed AdmissionReview", "… without a usable request", "this webhook handles
//   …", "… carries no object": the apiserver sends well-formed reviews, each kind to its route.
// - "capms could not encode its defaults", "encoding the response", `typed`'s and `spec_patch`'s
//   serialization errors: no input causes them. `old_typed`: the schema keeps stored objects
//   decodable. `with_catalog`'s "metal-api cannot be reached": an outage, not the input.
// - cluster.rs `check_cluster_update`, spec.partition and spec.projectID, and `validate_machine`,
//   spec.providerID once allocated: the CRDs' CEL transition rules refuse those updates before
//   the validating webhook (CEL lets an unset machine partition be set: that one is a row).
// - cluster.rs `check_public_network` without a public network, "no (several) external
//   network(s) carry the label": `Inventory::default_lab()` has exactly one default network.
// - Misfits of a MetalStackMachineTemplate: it has no mutating webhook, and the schema refuses a
//   field of the wrong type before the validating webhook.
// Sites the schema or CEL answer first for an object that fits its type (providerID's form, a
// port out of range, a firewall template's providerID, two firewall sources) are rows with a
// misfit field beside them: the mutating webhook then denies first, naming the misfit and what
// the rules say of the rest.

use super::*;
use metal_api::types::{AllocationNetwork, MachineAllocateRequest, NetworkAllocateRequest};
use std::collections::BTreeSet;

/// The user the webhooks are registered to skip, as installed. Nobody here is it: every request
/// in this test is a person's.
const MANAGER_USER: &str = "capms-denials-manager";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const V1ALPHA3: &str = "infrastructure.cluster.x-k8s.io/v1alpha3";
const V1ALPHA4: &str = "infrastructure.cluster.x-k8s.io/v1alpha4";
const MACHINES: &str = "metalstackmachines.v1alpha4.infrastructure.cluster.x-k8s.io";
const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
/// Well-formed (the schema's pattern), but no project of metal-api's.
const NO_PROJECT: &str = "00000000-0000-0000-0000-000000000099";
/// The allocation holding machine 6, made in metal-api before capms starts.
const TAKEN: &str = "denials-taken";
const NO_SIZE: &str =
    "machine type \"c1-xlarge-x86\" is not a metal-stack size; valid: v1-small-x86";
const NO_PARTITION: &str = "partition \"vagrant\" does not exist in metal-api; valid: mini-lab";
const MACHINE_IMAGES: &str =
    "valid machine images: capms-ubuntu-1.33.5, capms-ubuntu-1.34.1, debian-13.0, ubuntu-26.4";
const FIREWALL_IMAGES: &str = "valid firewall images: firewall-ubuntu-3.0";
const EXTERNAL: &str = "valid external networks: internet-mini-lab";
const FIREWALL_NETWORKS: &str = "valid external networks: internet-mini-lab; valid shared private networks: none (capms adds the cluster's own private network itself)";
const UNDERLAY: &str = "network \"underlay-mini-lab\" is an underlay network, which metal-api adds to every firewall itself";
const IMMUTABLE_MACHINE: &str =
    "is immutable once the machine is allocated; create a new MetalStackMachine instead";
const FIREWALL_ALLOCATED: &str = "image and machineType are immutable once the firewall is allocated; create a new firewall instead";
const IMMUTABLE_TEMPLATE: &str = "spec.template: templates are immutable; create a new template and point the MachineDeployment, Cluster or MetalStackCluster at it";

/// What the lab holds beyond the inventory: the test's namespace and the private network of the
/// project allocated in metal-api.
struct Lab {
    ns: String,
    private: String,
}

/// A row's object (`kind`, `name`, `spec`, optionally `apiVersion`, v1alpha4 otherwise, and
/// `annotations`), and its merge patch when the row is an update: `patch` of the spec.
fn object_of(row: &Value) -> (Value, Option<Value>) {
    let kind = row["kind"].as_str().expect("kind");
    let name = row["name"].as_str().expect("name");
    let mut manifest = object(kind, name, row["spec"].clone());
    manifest["apiVersion"] = json!(row["apiVersion"].as_str().unwrap_or(V1ALPHA4));
    if let Some(annotations) = row.get("annotations") {
        manifest["metadata"]["annotations"] = annotations.clone();
    }
    (manifest, row.get("patch").map(|p| json!({"spec": p})))
}

/// Runs `rows` through kubectl as the admin (a person): a row with a patch creates its object
/// and is refused the update, one without is refused the creation. Each object is named once.
fn run(a: &Admission<'_>, rows: Vec<Value>, names: &mut BTreeSet<String>) {
    for row in rows {
        let (manifest, patch) = object_of(&row);
        let says = row["says"].as_array().expect("says");
        let mut expected: Vec<&str> = says.iter().map(|s| s.as_str().expect("text")).collect();
        // The webhook's answer: the schema and CEL word theirs otherwise.
        expected.push("denied the request");
        let kind = row["kind"].as_str().expect("kind");
        let name = row["name"].as_str().expect("name");
        assert!(names.insert(name.to_owned()), "two rows name {name}");
        eprintln!("{kind} {name}: {}", row["what"]);
        let file = format!("{name}.json");
        match patch {
            None => a.refused(&file, manifest, &expected),
            Some(patch) => {
                a.admitted(&file, manifest);
                refused_update(a, (kind, name), &patch, &expected);
            }
        }
    }
}

/// `kubectl patch --type=merge` of `kind` `name` is refused, and the error says every one of
/// `says`.
fn refused_update(a: &Admission<'_>, (kind, name): (&str, &str), patch: &Value, says: &[&str]) {
    let resource = format!("{}s.v1alpha4.{GROUP}", kind.to_lowercase());
    let patch = patch.to_string();
    let args: [&str; 8] = [
        "patch",
        "-n",
        a.ns,
        &resource,
        name,
        "--type=merge",
        "-p",
        &patch,
    ];
    let out = a.cp.kubectl_output(&args, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{kind} {name}: {patch} was admitted");
    for e in says {
        assert!(
            stderr.contains(e),
            "{kind} {name}: the error lacks {e:?}:\n{stderr}"
        );
    }
}

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": V1ALPHA4, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// `base` with the keys of `extra` set.
fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

fn small(image: &str) -> Value {
    json!({"image": image, "machineType": "v1-small-x86"})
}

/// A machine or firewall spec on the machine `provider_id`.
fn on(spec: Value, provider_id: &str) -> Value {
    with(spec, json!({"providerID": provider_id}))
}

/// A good firewall spec, with `extra`.
fn fw(extra: Value) -> Value {
    with(small("firewall-ubuntu-3.0"), extra)
}

/// A good cluster spec (no control-plane host: capms would allocate one), with `extra`.
fn cl(extra: Value) -> Value {
    let good = json!({"partition": "mini-lab", "projectID": PROJECT,
                      "publicNetworkID": "internet-mini-lab"});
    with(good, extra)
}

fn tmpl(spec: Value) -> Value {
    json!({"template": {"spec": spec}})
}

/// The id of machine `n` of the inventory (99: none).
fn mid(n: u8) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

fn pid(n: u8) -> String {
    format!("metalstack://{}", mid(n))
}

fn taken(path: &str) -> String {
    let machine = mid(6);
    format!("{path}: machine {machine} is already allocated (to \"{TAKEN}\" in project {PROJECT})")
}

fn no_project(path: &str) -> String {
    format!(
        "{path}: project \"{NO_PROJECT}\" does not exist in metal-api; valid: {PROJECT} (sample-project)"
    )
}

#[tokio::test(flavor = "current_thread")]
async fn every_denial_a_person_got_is_still_given_with_its_field_and_valid_choices() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("denials").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let private = prepare(&sim).await;
    let work = tempfile::tempdir().expect("temp dir");
    let mut manager = registered_as_installed(&ns.name, &sim.url, work.path()).await;
    let a = Admission {
        cp,
        ns: &ns.name,
        dir: work.path(),
    };
    both_webhooks_answer(&a).await;
    firewall_template_users(&a);
    let lab = Lab {
        ns: ns.name.clone(),
        private,
    };
    let tables = [
        machine_rows(),
        firewall_rows(&lab),
        cluster_rows(&lab),
        cluster_firewall_and_update_rows(&lab),
        template_rows(&lab),
    ];
    let mut names = BTreeSet::new();
    for rows in tables {
        run(&a, rows, &mut names);
    }
    template_replicas_skip_the_webhooks(&a);
    assert!(
        manager.process.is_running(),
        "{}",
        manager.process.log_tail()
    );
}

/// metal-api's state beyond the inventory that some denials need: a private network of the
/// project, and machine 6 allocated to someone else. Made before capms starts, so that its
/// catalog holds them from the first request on. Returns the network's id.
async fn prepare(sim: &RunningSim) -> String {
    let metal = sim.editor();
    let network = NetworkAllocateRequest {
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        name: "denials-private".into(),
        ..Default::default()
    };
    let network = metal
        .network_allocate(&network)
        .await
        .expect("private network");
    let machine = MachineAllocateRequest {
        uuid: Some(mid(6)),
        name: TAKEN.into(),
        hostname: TAKEN.into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: "ubuntu-26.4".into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.id.clone(),
            autoacquire: Some(true),
        }]),
        ..Default::default()
    };
    metal
        .machine_allocate(&machine)
        .await
        .expect("machine 6 allocated");
    network.id
}

/// capms for namespace `ns`, its webhooks registered as installed: with the `not-the-manager`
/// condition, for a user nobody here is.
async fn registered_as_installed(ns: &str, metal_api_url: &str, work: &Path) -> CapmsManager {
    let cp = ControlPlane::shared();
    let cert_dir = work.join("certs");
    cp.issue_serving_cert(&cert_dir);
    let manager = CapmsManager::start("capms-denials", ns, metal_api_url, &cert_dir, work, &[]);
    manager.wait_ready().await;
    cp.register_capms_webhooks(manager.webhook_port, ns, work, Some(MANAGER_USER));
    manager
}

/// Waits until the apiserver calls both webhooks: a new configuration takes it a moment.
async fn both_webhooks_answer(a: &Admission<'_>) {
    let bad_image = machine("probe-validate", small("ubuntu-99.04"));
    let no_image = machine("probe-mutate", json!({"machineType": "v1-small-x86"}));
    let probes = [
        // Without the validating webhook the dry run is admitted.
        write(a.dir, "probe-validate.json", bad_image),
        // Without the mutating webhook the schema answers ("Required value").
        write(a.dir, "probe-mutate.json", no_image),
    ];
    let both = || {
        let seen: Vec<String> = probes
            .iter()
            .map(|p| {
                let args = ["apply", "--dry-run=server", "-n", a.ns, "-f"];
                let out = a.cp.kubectl_output(&args, std::slice::from_ref(p));
                String::from_utf8_lossy(&out.stderr).into_owned()
            })
            .collect();
        async move {
            if seen.iter().all(|s| s.contains("denied the request")) {
                Ok(())
            } else {
                Err(seen.join("\n"))
            }
        }
    };
    let what = "the apiserver to call both webhooks";
    support::eventually_seen(what, Duration::from_secs(180), both).await;
}

/// The firewall templates' users: a template nobody uses whose networks no cluster can get, and
/// clusters naming `fwt-used-a` (which a row creates) and `fwt-used-b` (which a row changes).
fn firewall_template_users(a: &Admission<'_>) {
    let networks = json!({"networks": ["internet-mini-lab", "underlay-mini-lab"]});
    let unused = object(
        "MetalStackFirewallTemplate",
        "denials-underlay",
        tmpl(fw(networks)),
    );
    a.admitted("denials-underlay.json", unused);
    for (cluster, template) in [("fwt-user-a", "fwt-used-a"), ("fwt-user-b", "fwt-used-b")] {
        let spec = cl(json!({"firewallTemplateRef": {"name": template}}));
        // Admitted with a warning: the template does not exist yet.
        a.admitted(
            &format!("{cluster}.json"),
            object("MetalStackCluster", cluster, spec),
        );
    }
}

/// MetalStackMachines made or changed by hand, also with Cluster API's clone annotation where
/// it exempts nothing.
fn machine_rows() -> Vec<Value> {
    let other = |image: &str| json!({"image": image, "machineType": "c1-xlarge-x86"});
    let allocated = on(
        small("ubuntu-26.4"),
        &format!("metal://mini-lab/{}", mid(1)),
    );
    let replica = json!({"cluster.x-k8s.io/cloned-from-groupkind": "MetalStackMachineTemplate.infrastructure.cluster.x-k8s.io"});
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
               "annotations": {"cluster.x-k8s.io/cloned-from-groupkind": "MetalStackClusterTemplate.infrastructure.cluster.x-k8s.io"},
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        json!({"what": "a made-by-hand clone annotation of another group", "kind": "MetalStackMachine", "name": "m-cloned-other-group", "spec": small("ubuntu-99.04"),
               "annotations": {"cluster.x-k8s.io/cloned-from-groupkind": "MetalStackMachineTemplate.example.com"},
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
        // Only the creation of a template's replica skips the webhooks, not a person's change.
        json!({"what": "a person's change to a template's replica", "kind": "MetalStackMachine", "name": "mu-replica", "annotations": replica, "spec": small("ubuntu-26.4"), "patch": {"image": "ubuntu-99.04"},
               "says": ["spec.image: image \"ubuntu-99.04\" does not resolve to any image in metal-api", MACHINE_IMAGES]}),
    ]
}

/// MetalStackFirewalls, and MetalStackFirewallTemplates against the clusters using them.
fn firewall_rows(lab: &Lab) -> Vec<Value> {
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

fn cluster_rows(lab: &Lab) -> Vec<Value> {
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
fn cluster_firewall_and_update_rows(lab: &Lab) -> Vec<Value> {
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
fn template_rows(lab: &Lab) -> Vec<Value> {
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

/// The one intended change: a MetalStackMachine Cluster API clones from a
/// MetalStackMachineTemplate reaches neither webhook. Its unknown image is admitted (the template
/// was the place it was checked) and its partition stays unset, where a hand-made twin of the
/// same cluster gets the cluster's.
fn template_replicas_skip_the_webhooks(a: &Admission<'_>) {
    a.admitted(
        "home.json",
        object("MetalStackCluster", "home", cl(json!({}))),
    );
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "home", "namespace": a.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "home"}}});
    a.cp.apply(&write(a.dir, "home-cluster.json", cluster));
    let of_home = |name: &str, image: &str| {
        let mut m = machine(name, small(image));
        m["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "home"});
        m
    };
    a.admitted("hand-made.json", of_home("hand-made", "ubuntu-26.4"));
    let twin = a.get(MACHINES, "hand-made");
    assert_eq!(
        twin["spec"]["partition"], "mini-lab",
        "the hand-made twin is defaulted: {twin:#}"
    );

    let mut replica = of_home("replica", "ubuntu-99.04");
    replica["metadata"]["annotations"] = json!({
        "cluster.x-k8s.io/cloned-from-groupkind": "MetalStackMachineTemplate.infrastructure.cluster.x-k8s.io",
        "cluster.x-k8s.io/cloned-from-name": "workers"});
    a.admitted("replica.json", replica);
    let stored = a.get(MACHINES, "replica");
    assert_eq!(stored["spec"]["image"], "ubuntu-99.04", "{stored:#}");
    assert!(
        stored["spec"]["partition"].is_null(),
        "a template's replica is not defaulted: {stored:#}"
    );
}
