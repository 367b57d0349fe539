//! The admission webhooks as the real kube-apiserver and kubectl see them, and the TLS server's
//! properties: TLS 1.2+, certificate rotation on disk (also under requests), readiness, metrics.

use crate::support;

use metal_sim::inventory::Inventory;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{CapmsManager, ControlPlane, RunningSim, eventually};

mod api_v2;
mod credentials;
mod denials;
mod firewall_templates;
mod own_and_metadata_updates;
use own_and_metadata_updates::{
    metadata_only_updates_never_reach_the_webhooks,
    the_managers_own_updates_never_reach_the_webhooks,
};
mod rotation;
mod tls;
use tls::{file_serial, served_serial};

fn write(dir: &Path, name: &str, manifest: Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).expect("json")).expect("write");
    path
}

fn machine(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine", "metadata": {"name": name}, "spec": spec})
}

fn lab_cluster(name: &str, public_network: &str, endpoint: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha3", "kind": "MetalStackCluster", "metadata": {"name": name},
           "spec": {"partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001",
                    "publicNetworkID": public_network, "controlPlaneEndpoint": endpoint}})
}

/// capms for namespace `ns`, serving a certificate of the shared control plane's CA from
/// `work/certs`, its webhooks registered there once it is ready, as installed: naming
/// `manager_user` as the user whose updates need no admission.
async fn registered_manager(
    (name, manager_user): (&str, &str),
    ns: &str,
    metal_api_url: &str,
    work: &Path,
) -> CapmsManager {
    let cp = ControlPlane::shared();
    let cert_dir = work.join("certs");
    cp.issue_serving_cert(&cert_dir);
    let manager = CapmsManager::start(name, ns, metal_api_url, &cert_dir, work, &[]);
    manager.wait_ready().await;
    cp.register_capms_webhooks(manager.webhook_port, ns, work, Some(manager_user));
    manager
}

/// kubectl failed (`out`), and its error for `what` contains every one of `expected`.
fn says_all(what: &str, out: &std::process::Output, expected: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} was admitted");
    for e in expected {
        assert!(
            stderr.contains(e),
            "kubectl's error for {what} lacks {e:?}:\n{stderr}"
        );
    }
}

/// kubectl against capms's webhooks registered on a real apiserver, in one namespace.
struct Admission<'a> {
    cp: &'a ControlPlane,
    ns: &'a str,
    dir: &'a Path,
}

impl Admission<'_> {
    fn apply(&self, file: &Path) -> std::process::Output {
        self.cp
            .kubectl_output(&["apply", "-n", self.ns, "-f"], &[file.to_path_buf()])
    }

    /// `manifest` is refused, and kubectl's error contains every one of `expected`.
    fn refused(&self, name: &str, manifest: Value, expected: &[&str]) {
        let file = write(self.dir, name, manifest);
        let out = self.apply(&file);
        says_all(&file.display().to_string(), &out, expected);
    }

    /// `manifest` is admitted; returns kubectl's warnings.
    fn admitted(&self, name: &str, manifest: Value) -> String {
        let out = self.apply(&write(self.dir, name, manifest));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    }

    /// `kubectl patch --type=merge` of `resource` `name`, as the admin (a person) or as the
    /// user of `kubeconfig`.
    fn patch_as(
        &self,
        kubeconfig: Option<&Path>,
        (resource, name): (&str, &str),
        patch: &str,
    ) -> std::process::Output {
        let mut args = Vec::new();
        if let Some(k) = kubeconfig {
            args.extend(["--kubeconfig", k.to_str().expect("a UTF-8 path")]);
        }
        args.extend([
            "patch",
            "-n",
            self.ns,
            resource,
            name,
            "--type=merge",
            "-p",
            patch,
        ]);
        self.cp.kubectl_output(&args, &[])
    }

    /// `kubectl patch --type=merge` of MetalStackCluster `name`.
    fn patch_cluster(&self, name: &str, patch: &str) -> std::process::Output {
        self.patch_as(None, ("metalstackcluster", name), patch)
    }

    /// Waits until a server-side dry run of `manifest` (a cluster naming credentials) is judged by
    /// its metal-api's catalog: a tenant's catalog is fetched when first needed, and on a loaded
    /// machine that may take longer than admission waits for it (admitting with a warning).
    fn wait_for_catalog_of(&self, name: &str, manifest: Value) {
        self.wait_for_dry_run(
            name,
            manifest,
            "the tenant's catalog served",
            |ok, stderr| ok && !stderr.contains("could not be read"),
        );
    }

    /// Waits until a server-side dry run of `manifest` is answered as `judged` (admitted?,
    /// kubectl's stderr) says: `what`.
    fn wait_for_dry_run(
        &self,
        name: &str,
        manifest: Value,
        what: &str,
        judged: impl Fn(bool, &str) -> bool,
    ) {
        let probe = write(self.dir, name, manifest);
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            let args = ["apply", "--dry-run=server", "-n", self.ns, "-f"];
            let out = self.cp.kubectl_output(&args, std::slice::from_ref(&probe));
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if judged(out.status.success(), &stderr) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never {what}: {stderr}"
            );
            // sleep-ok: the poll's interval while the tenant's catalog is fetched.
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn get(&self, kind: &str, name: &str) -> Value {
        let got = self
            .cp
            .kubectl(&["get", "-n", self.ns, kind, name, "-o", "json"], &[]);
        serde_json::from_str(&got).expect("json")
    }
}

// Two workers: the checks below block one in kubectl while the simulators answer on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_fails_at_once_with_field_and_valid_choices() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("webhooks").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let tenant_sim = RunningSim::start(api_v2::constrained_inventory(), "/metal").await;
    let v2_sim = RunningSim::start(api_v2::constrained_inventory(), "/metal").await;
    let v2_tokens = [
        v2_sim.mint_capms_token(api_v2::PROJECT, None).await,
        v2_sim.mint_capms_token(api_v2::PROJECT, None).await,
        v2_sim.mint_capms_token(api_v2::OTHER_PROJECT, None).await,
    ];
    let work = tempfile::tempdir().expect("temp dir");
    let user = format!("capms-{}", ns.name);
    let manager_kubeconfig = cp.shipped_role_kubeconfig(&user, &work.path().join("user"));
    let mut manager = registered_manager(("capms", &user), &ns.name, &sim.url, work.path()).await;
    let admission = Admission {
        cp,
        ns: &ns.name,
        dir: work.path(),
    };
    unknown_choices_are_refused_naming_the_field_and_the_valid_ones(&admission);
    go_provider_objects_are_checked_in_their_own_field_names(&admission);
    good_objects_are_admitted_and_defaulted(&admission);
    credentials::credentials_are_a_secret_of_the_namespace_of_the_right_shape(&admission);
    credentials::a_tenant_is_judged_by_its_own_metal_api(&admission, &tenant_sim);
    let v2_tokens = v2_tokens
        .each_ref()
        .map(|t| t["secret"].as_str().expect("a token"));
    api_v2::a_tenant_on_api_v2_is_refused_what_metal_apiserver_refuses(
        &admission, &v2_sim, v2_tokens,
    );
    firewall_templates::templates_change_only_into_what_their_clusters_can_use(&admission);
    firewall_templates::templates_of_both_schemas_list_together_as_v1alpha1(&admission);
    metadata_only_updates_never_reach_the_webhooks(&admission, &manager).await;
    the_managers_own_updates_never_reach_the_webhooks(&admission, &manager, &manager_kubeconfig)
        .await;
    immutable_fields_refuse_updates_and_deletion_is_never_blocked(&admission);
    metrics_count_admissions(&manager).await;
    assert!(manager.process.is_running());
}

/// `v1alpha1` objects (the Go provider's API) reach the webhooks converted to `v1alpha4`; the
/// answers name their fields as `v1alpha1` has them, and a cluster's API server is defaulted to
/// the Go provider's port, of its static control-plane IP or of the IP capms allocates.
fn go_provider_objects_are_checked_in_their_own_field_names(a: &Admission<'_>) {
    let go = "infrastructure.cluster.x-k8s.io/v1alpha1";
    a.refused(
        "go-size.json",
        json!({"apiVersion": go, "kind": "MetalStackMachine", "metadata": {"name": "go-bad-size"},
               "spec": {"image": "ubuntu-26.4", "size": "c1-xlarge-x86"}}),
        &[
            "spec.size: machine type \"c1-xlarge-x86\" is not a metal-stack size; valid: v1-small-x86",
        ],
    );
    let cluster = |name: &str, extra: Value| {
        let mut spec =
            json!({"partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001"});
        spec.as_object_mut()
            .expect("spec")
            .extend(extra.as_object().expect("extra").clone());
        json!({"apiVersion": go, "kind": "MetalStackCluster", "metadata": {"name": name}, "spec": spec})
    };
    a.refused(
        "go-network.json",
        cluster(
            "go-bad-network",
            json!({"nodeNetworkID": "nope", "controlPlaneIP": "127.100.0.142"}),
        ),
        &["spec.nodeNetworkID: network \"nope\" does not exist in metal-api"],
    );
    a.admitted(
        "go-cluster.json",
        cluster("go-cluster", json!({"controlPlaneIP": "127.100.0.142"})),
    );
    let stored = a.get(
        "metalstackclusters.v1alpha1.infrastructure.cluster.x-k8s.io",
        "go-cluster",
    );
    assert_eq!(
        stored["spec"]["controlPlaneEndpoint"],
        json!({"host": "127.100.0.142", "port": 443}),
        "{stored:#}"
    );
    assert!(
        stored["metadata"]["annotations"]["conversion.capms.metal-stack.io/kept"].is_null(),
        "nothing to keep for a v1alpha1 object: {stored:#}"
    );
    // Without an IP, on port 443 of the IP capms will allocate: v1alpha1 shows no endpoint until
    // the host is known, capms's versions show the port.
    a.admitted("go-no-ip.json", cluster("go-no-ip", json!({})));
    let hub = a.get(
        "metalstackclusters.v1alpha4.infrastructure.cluster.x-k8s.io",
        "go-no-ip",
    );
    assert_eq!(
        hub["spec"]["controlPlaneEndpoint"],
        json!({"port": 443}),
        "{hub:#}"
    );
    let go_view = a.get(
        "metalstackclusters.v1alpha1.infrastructure.cluster.x-k8s.io",
        "go-no-ip",
    );
    assert!(
        go_view["spec"]["controlPlaneEndpoint"].is_null(),
        "{go_view:#}"
    );
}

fn unknown_choices_are_refused_naming_the_field_and_the_valid_ones(a: &Admission<'_>) {
    a.refused(
        "image.json",
        machine(
            "bad-image",
            json!({"image": "ubuntu-99.04", "machineType": "v1-small-x86"}),
        ),
        &[
            "denied the request",
            "spec.image: image \"ubuntu-99.04\" does not resolve",
            "valid machine images: capms-ubuntu-1.33.5, capms-ubuntu-1.34.1, debian-13.0, ubuntu-26.4",
        ],
    );
    a.refused(
        "size.json",
        machine(
            "bad-size",
            json!({"image": "ubuntu-26.4", "machineType": "c1-xlarge-x86"}),
        ),
        &[
            "spec.machineType: machine type \"c1-xlarge-x86\" is not a metal-stack size; valid: v1-small-x86",
        ],
    );
    a.refused(
        "fw-image.json",
        machine(
            "fw-image",
            json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86"}),
        ),
        &[
            "spec.image: image \"firewall-ubuntu-3.0\" resolves to firewall-ubuntu-3.0 which has features [firewall], not machine",
        ],
    );
    a.refused(
        "partition.json",
        machine(
            "bad-partition",
            json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86", "partition": "vagrant"}),
        ),
        &["spec.partition: partition \"vagrant\" does not exist in metal-api; valid: mini-lab"],
    );
    a.refused(
        "private.json",
        lab_cluster(
            "private-public",
            "tenant-super-network-mini-lab",
            json!({"host": "127.100.0.9"}),
        ),
        &[
            "spec.publicNetworkID: network \"tenant-super-network-mini-lab\" is not an external network",
            "valid external networks: internet-mini-lab",
        ],
    );
    // One field that does not fit the type hides none of the others.
    let mut misfit = lab_cluster(
        "misfit",
        "internet-mini-lab",
        json!({"host": "127.100.0.9"}),
    );
    misfit["spec"]["projectID"] = json!("no-such-project");
    misfit["spec"]["firewallSpec"] = json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
        "rules": {"egress": [{"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]},
                             {"protocol": "tcp", "ports": [70000], "to": ["0.0.0.0/0"]}]}});
    a.refused(
        "misfit.json",
        misfit,
        &[
            "spec.firewallSpec.rules.egress[0].protocol: unknown variant `icmp`, expected `tcp` or `udp`",
            "spec.firewallSpec.rules.egress[1].ports[0]: port 70000 does not exist; valid: 0 to 65535",
            "spec.projectID: project \"no-such-project\" does not exist in metal-api",
        ],
    );
}

/// A good cluster comes back defaulted (port 6443); a firewall template that does not exist (yet)
/// is a warning, not a denial; a machine with the cluster-name label gets its cluster's partition.
fn good_objects_are_admitted_and_defaulted(a: &Admission<'_>) {
    let good = lab_cluster("good", "internet-mini-lab", json!({"host": "127.100.0.9"}));
    a.admitted("good.json", good);
    assert_eq!(
        a.get("metalstackcluster", "good")["spec"]["controlPlaneEndpoint"],
        json!({"host": "127.100.0.9", "port": 6443})
    );
    let mut templated = lab_cluster("templated", "internet-mini-lab", json!({}));
    templated["spec"]["firewallTemplateRef"] = json!({"name": "edge"});
    let warnings = a.admitted("templated.json", templated);
    assert!(
        warnings.contains(&format!(
            "Warning: spec.firewallTemplateRef: MetalStackFirewallTemplate {}/edge does not exist (yet)",
            a.ns
        )) && warnings.contains("MetalStackFirewallTemplates in the namespace: none"),
        "{warnings}"
    );
    let mut labelled = machine(
        "good-machine",
        json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86"}),
    );
    labelled["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "good"});
    a.cp.apply(&write(a.dir, "cluster.json", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "good", "namespace": a.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "good"}}})));
    a.admitted("good-machine.json", labelled);
    assert_eq!(
        a.get("metalstackmachine", "good-machine")["spec"]["partition"],
        "mini-lab"
    );
}

fn immutable_fields_refuse_updates_and_deletion_is_never_blocked(a: &Admission<'_>) {
    let out = a.patch_cluster("good", r#"{"spec":{"publicNetworkID":"other"}}"#);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("spec.publicNetworkID: is immutable once set")
    );
    a.cp.kubectl(
        &[
            "delete",
            "-n",
            a.ns,
            "metalstackmachine",
            "good-machine",
            "--wait=false",
        ],
        &[],
    );
}

/// capms's /metrics page.
pub(super) async fn metrics_text(manager: &CapmsManager) -> String {
    reqwest::get(format!("http://127.0.0.1:{}/metrics", manager.metrics_port))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// /metrics is Prometheus text and counts admissions.
async fn metrics_count_admissions(manager: &CapmsManager) {
    let metrics = metrics_text(manager).await;
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line}"));
        assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
        let name = series.split('{').next().unwrap_or_default();
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in {line}"
        );
        if series.contains('{') {
            assert!(series.ends_with('}'), "bad labels in {line}");
        }
    }
    assert!(metrics.contains("capms_admission_requests_total{kind=\"MetalStackMachine\",step=\"validate\",operation=\"CREATE\",result=\"denied\"}"), "{metrics}");
    assert!(metrics.contains("capms_admission_duration_seconds_bucket{"));
}
