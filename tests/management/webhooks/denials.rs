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
//   decodable. `with_catalog`'s "metal-api's catalog could not be read": an outage, not the input.
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
mod rows;
use capms::api::common::GROUP;
use capms::capi::CLONED_FROM_GROUPKIND;
use metal_api::types::{AllocationNetwork, MachineAllocateRequest, NetworkAllocateRequest};
use rows::{
    cluster_firewall_and_update_rows, cluster_rows, firewall_rows, machine_rows, template_rows,
};
use std::collections::BTreeSet;

/// The user the webhooks are registered to skip, as installed. Nobody here is it: every request
/// in this test is a person's.
const MANAGER_USER: &str = "capms-denials-manager";
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
    let out = a.patch_as(None, (&resource, name), &patch.to_string());
    says_all(&format!("{kind} {name}: {patch}"), &out, says);
}

/// The clone mark of a MetalStackMachineTemplate's replica.
const MACHINE_TEMPLATE: &str = "MetalStackMachineTemplate.infrastructure.cluster.x-k8s.io";

/// Cluster API's mark on a replica it cloned from the template kind `template`.
fn cloned_from(template: &str) -> Value {
    json!({CLONED_FROM_GROUPKIND: template})
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
    // Registered as installed, naming a manager user nobody here is.
    let identity = ("capms-denials", MANAGER_USER);
    let mut manager = registered_manager(identity, &ns.name, &sim.url, work.path()).await;
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
    replica["metadata"]["annotations"] = cloned_from(MACHINE_TEMPLATE);
    replica["metadata"]["annotations"][capms::capi::CLONED_FROM_NAME] = json!("workers");
    a.admitted("replica.json", replica);
    let stored = a.get(MACHINES, "replica");
    assert_eq!(stored["spec"]["image"], "ubuntu-99.04", "{stored:#}");
    assert!(
        stored["spec"]["partition"].is_null(),
        "a template's replica is not defaulted: {stored:#}"
    );
    allocated_replicas_stay_undefaulted(a, &of_home("named-replica", "ubuntu-26.4"));
}

/// A person's later change to an allocated replica is admitted, and its partition, unwritten
/// at creation, is not written then either: it is fixed once the machine is allocated.
fn allocated_replicas_stay_undefaulted(a: &Admission<'_>, replica: &Value) {
    let mut replica = replica.clone();
    replica["metadata"]["annotations"] = cloned_from(MACHINE_TEMPLATE);
    replica["spec"]["providerID"] = json!(pid(5));
    a.admitted("named-replica.json", replica);
    let patch = json!({"spec": {"sshKeys": ["ssh-ed25519 AAAA"]}}).to_string();
    let out = a.patch_as(None, (MACHINES, "named-replica"), &patch);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "a person's sshKeys change was refused: {stderr}"
    );
    let stored = a.get(MACHINES, "named-replica");
    assert!(stored["spec"]["partition"].is_null(), "{stored:#}");
}
