//! Installing capms like a provider: the clusterctl release files, processed and rendered by the
//! real clusterctl, accepted by the real kube-apiserver (with our webhooks in the path).

use crate::support;

use metal_sim::inventory::Inventory;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{CapmsManager, ControlPlane, RunningSim, binaries, repo_root};

fn release(dir: &Path) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("manifests/release.sh"))
        .arg(dir)
        .output()
        .expect("release.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

/// Runs the real clusterctl with `env` and returns its stdout.
fn clusterctl(args: &[&str], env: &[(&str, &str)]) -> String {
    let cp = ControlPlane::shared();
    let home = tempfile::tempdir().expect("home");
    let out = support::clusterctl::clusterctl_command()
        .args(args)
        .env("KUBECONFIG", &cp.kubeconfig)
        .env("HOME", home.path())
        .envs(env.iter().copied())
        .output()
        .expect("clusterctl");
    assert!(
        out.status.success(),
        "clusterctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `template` rendered by clusterctl as cluster `name` in `ns` with the lab's variables and
/// `control_plane_ip`, plus `args` and `env`.
fn render(
    template: &Path,
    (name, ns, control_plane_ip): (&str, &str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let template = template.to_string_lossy();
    let mut all_args = vec!["generate", "cluster", name, "--from", &template];
    all_args.extend(["--kubernetes-version", "v1.33.5", "--target-namespace", ns]);
    all_args.extend(args);
    let mut all_env = vec![
        ("METAL_PARTITION", "mini-lab"),
        ("METAL_PROJECT_ID", "00000000-0000-0000-0000-000000000001"),
        ("METAL_PUBLIC_NETWORK_ID", "internet-mini-lab"),
        ("CONTROL_PLANE_IP", control_plane_ip),
        ("METAL_API_URL", "http://127.0.0.1:8080/metal"),
        ("METAL_API_HMAC", "metal-edit"),
    ];
    all_env.extend(env);
    clusterctl(&all_args, &all_env)
}

fn kinds(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn release_files_are_complete_and_install_on_a_fresh_control_plane() {
    // A control plane of its own: the installed webhook configurations point at a Service no pod
    // serves, and the API server must never try to call them for another test's objects (it
    // would resolve the Service's name through the machine's DNS).
    let cp = &ControlPlane::management("install");
    let dir = tempfile::tempdir().expect("dir");
    let out = release(dir.path());
    for f in [
        "infrastructure-components.yaml",
        "metadata.yaml",
        "cluster-template.yaml",
        "cluster-template-ignition.yaml",
        "cluster-template-calico.yaml",
        "cluster-template-topology.yaml",
        "clusterclass-metal-stack-kubeadm.yaml",
    ] {
        assert!(out.join(f).exists(), "{f} is produced");
    }
    let metadata = std::fs::read_to_string(out.join("metadata.yaml")).expect("metadata");
    assert!(metadata.contains("kind: Metadata") && metadata.contains("contract: v1beta2"));

    // clusterctl's own variable processing, as `clusterctl init` would do it.
    let components = clusterctl(
        &[
            "generate",
            "yaml",
            "--from",
            &out.join("infrastructure-components.yaml").to_string_lossy(),
        ],
        &[
            ("METAL_API_URL", "http://127.0.0.1:8080/metal"),
            ("METAL_API_HMAC", "metal-edit"),
        ],
    );
    assert!(!components.contains("${"), "every variable substituted");
    let processed = dir.path().join("components.yaml");
    std::fs::write(&processed, &components).expect("write");
    let kinds = kinds(&components);
    assert_eq!(
        kinds.iter().filter(|k| *k == "Namespace").count(),
        1,
        "exactly one Namespace (clusterctl contract)"
    );
    assert!(kinds.contains(&"Deployment".to_owned()));

    components_follow_the_provider_contract(&components);

    // cert-manager's CRDs, then every object of ours: all accepted by the real apiserver.
    cp.apply(&binaries().cert_manager.join("crd"));
    cp.wait_crds_established();
    cp.apply(&processed);
    let listed = cp.kubectl(&["get", "-f"], std::slice::from_ref(&processed));
    for name in [
        "capms-controller-manager",
        "capms-webhook-service",
        "capms-serving-cert",
        "capms-manager-role",
        "capms-validating-webhook-configuration",
    ] {
        assert!(listed.contains(name), "{name} exists:\n{listed}");
    }
    // Nothing may call these webhook configurations: they point at a Service no pod serves.
    cp.kubectl(
        &[
            "delete",
            "mutatingwebhookconfiguration",
            "capms-mutating-webhook-configuration",
        ],
        &[],
    );
    cp.kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            "capms-validating-webhook-configuration",
        ],
        &[],
    );
}

#[tokio::test(flavor = "current_thread")]
async fn clusterctl_renders_the_template_and_the_apiserver_accepts_it_with_our_webhooks() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("template").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let work = tempfile::tempdir().expect("dir");
    let out = release(&work.path().join("release"));
    let cert_dir = work.path().join("certs");
    cp.issue_serving_cert(&cert_dir);
    let capms = CapmsManager::start("capms", &ns.name, &sim.url, &cert_dir, work.path(), &[]);
    capms.wait_ready().await;
    cp.register_capms_webhooks(capms.webhook_port, &ns.name, work.path(), None);

    let rendered = render(
        &out.join("cluster-template.yaml"),
        ("demo", &ns.name, "127.100.0.250"),
        &["--worker-machine-count", "2"],
        &[
            ("METAL_CONTROL_PLANE_IMAGE", "ubuntu-26.4"),
            ("METAL_WORKER_IMAGE", "ubuntu-26.4"),
        ],
    );
    assert_eq!(
        kinds(&rendered),
        [
            "Cluster",
            "MetalStackCluster",
            "MetalStackMachineTemplate",
            "KubeadmControlPlane",
            "MetalStackMachineTemplate",
            "KubeadmConfigTemplate",
            "MachineDeployment",
            "ClusterResourceSet",
            "Secret",
            "ConfigMap",
            "MetalStackRemediationTemplate",
            "MachineHealthCheck"
        ]
    );
    let file = work.path().join("cluster.yaml");
    std::fs::write(&file, &rendered).expect("write");
    let applied = cp.kubectl_output(&["apply", "--server-side", "-f"], &[file]);
    assert!(
        applied.status.success(),
        "the rendered template is accepted: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    the_template_cluster_is_as_rendered(cp, &ns.name);

    calico_flavor_renders(&out, &ns.name);

    a_rendering_with_unknown_choices_is_refused(cp, &out, &ns.name, work.path());
}

/// The rendered MetalStackCluster: the control-plane IP as its endpoint, the firewall's rules.
fn the_template_cluster_is_as_rendered(cp: &ControlPlane, ns: &str) {
    let msc: serde_json::Value = serde_json::from_str(&cp.kubectl(
        &["get", "-n", ns, "metalstackcluster", "demo", "-o", "json"],
        &[],
    ))
    .expect("json");
    assert_eq!(msc["spec"]["controlPlaneEndpoint"]["port"], 6443);
    assert_eq!(msc["spec"]["controlPlaneEndpoint"]["host"], "127.100.0.250");
    assert_eq!(
        msc["spec"]["firewallSpec"]["rules"]["egress"][0]["protocol"],
        "tcp"
    );
}

/// The documents themselves: provider label everywhere, container named manager, one
/// namespace, a locked-down pod.
fn components_follow_the_provider_contract(components: &str) {
    let docs: Vec<serde_json::Value> = components
        .split("\n---")
        .filter(|d| d.contains("kind:"))
        .map(|d| serde_saphyr::from_str(d).expect("YAML document"))
        .collect();
    for d in &docs {
        assert_eq!(
            d["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-metal-stack",
            "{} {}",
            d["kind"], d["metadata"]["name"]
        );
        if let Some(ns) = d["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "capms-system");
        }
    }
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "manager");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
}

/// The template with an image and a machine type metal-api does not have is refused at once,
/// naming both fields.
fn a_rendering_with_unknown_choices_is_refused(
    cp: &ControlPlane,
    out: &Path,
    ns: &str,
    work: &Path,
) {
    let bad = render(
        &out.join("cluster-template.yaml"),
        ("bad", ns, "127.100.0.251"),
        &[],
        &[
            ("METAL_CONTROL_PLANE_IMAGE", "ubuntu-26.4"),
            ("METAL_CONTROL_PLANE_MACHINE_TYPE", "v9-huge"),
        ],
    );
    let file = work.join("bad.yaml");
    std::fs::write(&file, &bad).expect("write");
    let refused = cp.kubectl_output(&["apply", "--server-side", "-f"], &[file]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("spec.template.spec.image: image \"ubuntu-24.4\" does not resolve"),
        "the workers' image: {stderr}"
    );
    assert!(
        stderr.contains(
            "spec.template.spec.machineType: machine type \"v9-huge\" is not a metal-stack size; valid: v1-small-x86"
        ),
        "the control plane's machine type: {stderr}"
    );
}

/// clusterctl renders the Calico flavor: the template's objects and a HelmChartProxy for the
/// tigera-operator chart with the cluster's pod CIDR. Not applied: its CRD comes with Cluster
/// API's Helm add-on provider, which the Go module proxy refuses here
/// (`sigs.k8s.io/cluster-api-addon-provider-helm`: 403 "This module version is not available").
fn calico_flavor_renders(release: &Path, ns: &str) {
    let rendered = render(
        &release.join("cluster-template-calico.yaml"),
        ("calico", ns, "127.100.0.252"),
        &[],
        &[("POD_CIDR", "10.244.0.0/16")],
    );
    assert_eq!(
        kinds(&rendered).last().map(String::as_str),
        Some("HelmChartProxy")
    );
    let proxy: serde_json::Value = rendered
        .split("\n---")
        .find(|d| d.contains("kind: HelmChartProxy"))
        .map(|d| serde_saphyr::from_str(d).expect("YAML document"))
        .expect("the HelmChartProxy");
    assert_eq!(proxy["spec"]["version"], "v3.28.3");
    assert_eq!(
        proxy["spec"]["clusterSelector"]["matchLabels"]["cluster.metal-stack.io/name"],
        "calico"
    );
    let values = proxy["spec"]["valuesTemplate"].as_str().unwrap_or_default();
    assert!(values.contains("cidr: 10.244.0.0/16"), "{values}");
}

/// A shipped template's lines after its header comment.
fn template_lines(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("manifests/clusterctl").join(name))
        .expect("template");
    text.lines()
        .skip_while(|l| l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The Ignition flavor is the default template with `format: ignition` for the control plane's
/// and the workers' kubeadm configurations, nothing else (its header comment aside).
#[test]
fn the_ignition_flavor_differs_from_the_template_only_in_its_bootstrap_format() {
    let (base, ignition) = (
        template_lines("cluster-template.yaml"),
        template_lines("cluster-template-ignition.yaml"),
    );
    let formats: Vec<_> = ignition
        .iter()
        .filter(|l| l.trim() == "format: ignition")
        .collect();
    assert_eq!(
        formats.len(),
        2,
        "the control plane's and the workers' format"
    );
    let rest: Vec<_> = ignition
        .iter()
        .filter(|l| l.trim() != "format: ignition")
        .cloned()
        .collect();
    assert_eq!(rest, base);
}

/// The Calico flavor is the default template with the Cluster labelled for Calico and the
/// HelmChartProxy that installs it appended, nothing else.
#[test]
fn the_calico_flavor_differs_from_the_template_only_in_its_cni() {
    let (base, calico) = (
        template_lines("cluster-template.yaml"),
        template_lines("cluster-template-calico.yaml"),
    );
    let proxy = calico
        .iter()
        .position(|l| l == "kind: HelmChartProxy")
        .expect("a HelmChartProxy");
    let start = calico[..proxy]
        .iter()
        .rposition(|l| l == "---")
        .expect("its document");
    let label = [
        "    # Selects the Calico HelmChartProxy (at the end).",
        "    cluster.metal-stack.io/cni: calico",
    ];
    let rest: Vec<_> = calico[..start]
        .iter()
        .filter(|l| !label.contains(&l.as_str()))
        .cloned()
        .collect();
    assert_eq!(rest, base);
    assert_eq!(start - rest.len(), label.len(), "the Cluster's label, once");
    let appended = calico[start..].iter().filter(|l| *l == "---").count();
    assert_eq!(appended, 1, "one document appended: the HelmChartProxy");
}

/// The topology flavor installs the same add-ons as the default template (metal-ccm's
/// ClusterResourceSet, Secret and ConfigMap), line for line.
#[test]
fn the_topology_flavor_installs_the_template_s_add_ons() {
    let read = |name: &str| {
        std::fs::read_to_string(repo_root().join("manifests/clusterctl").join(name))
            .expect("template")
    };
    let (base, topology) = (
        read("cluster-template.yaml"),
        read("cluster-template-topology.yaml"),
    );
    let start = "# metal-ccm, installed into the workload cluster";
    let from = |text: &str| text.find(start).map(|i| text[i..].to_owned());
    let base_addons = from(&base).and_then(|rest| {
        let end = rest.find("---\n# Hung workers")?;
        Some(rest[..end].to_owned())
    });
    assert!(base_addons.is_some(), "the template's add-ons");
    assert_eq!(from(&topology), base_addons);
}
