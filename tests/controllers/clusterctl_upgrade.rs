//! The switch from the Go provider by `clusterctl upgrade apply`: on a management cluster where
//! `clusterctl init` installed the Go provider v0.8.0, clusterctl replaces its components with
//! capms's release files (a provider override in its configuration) and records capms in its
//! inventory. The CRDs keep every stored object.

use super::*;

const NS: &str = "capms-system";

/// Runs the upgrade, checks what it changed, routes the installed webhooks to loopback and
/// returns the arguments capms then serves them with.
pub(super) async fn upgraded_by_clusterctl(cp: &ControlPlane, env: &Env) -> Vec<String> {
    let out = cp.upgrade_to_capms_by_clusterctl(&env.sim.url).await;
    assert!(
        out.status.success(),
        "clusterctl upgrade apply failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    the_go_provider_is_replaced(cp);
    let port = free_port();
    cp.route_capms_webhooks_to_loopback(port);
    let certs = env.work.path().join("serving-certs");
    std::fs::create_dir_all(&certs).expect("certificate dir");
    cp.issue_serving_cert(&certs);
    vec![
        "--webhook-host=127.0.0.1".into(),
        format!("--webhook-port={port}"),
        format!("--webhook-cert-dir={}", certs.display()),
    ]
}

/// The inventory names capms's release; the Go provider's own objects are gone and capms's are
/// in their place; the CRDs are capms's, storing `v1alpha4`, with `v1alpha1` still recorded as
/// stored.
fn the_go_provider_is_replaced(cp: &ControlPlane) {
    let get = |args: &[&str]| cp.kubectl(args, &[]);
    let version = get(&[
        "get",
        "providers.clusterctl.cluster.x-k8s.io",
        "-n",
        NS,
        "infrastructure-metal-stack",
        "-o",
        "jsonpath={.version}",
    ]);
    assert_eq!(
        version,
        support::clusterctl::capms_release(),
        "the inventory"
    );
    let image = get(&[
        "get",
        "deployment",
        "-n",
        NS,
        "capms-controller-manager",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert!(image.starts_with("ghcr.io/metal-stack/capms:"), "{image}");
    for (kind, name) in [
        ("secret", "capms-controller-manager-config"),
        ("serviceaccount", "capms-controller-manager"),
        (
            "clusterrole",
            "capms-system-capms-metalstackcluster-editor-role",
        ),
    ] {
        let left = get(&[
            "get",
            kind,
            name,
            "-n",
            NS,
            "--ignore-not-found",
            "-o",
            "name",
        ]);
        assert!(
            left.is_empty(),
            "the Go provider's {kind} {name} is deleted"
        );
    }
    get(&["get", "secret", "capms-metal-api", "-n", NS]);
    let crds: Value = serde_json::from_str(&get(&[
        "get",
        "crd",
        "-l",
        "clusterctl.cluster.x-k8s.io,cluster.x-k8s.io/provider=infrastructure-metal-stack",
        "-o",
        "json",
    ]))
    .expect("CRDs as JSON");
    let crds = crds["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        crds.len(),
        capms::api::crds().len(),
        "capms's CRDs, labelled"
    );
    let clusters = crds
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == "MetalStackCluster")
        .expect("the MetalStackCluster CRD");
    let storage: Vec<&Value> = clusters["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == true)
        .map(|v| &v["name"])
        .collect();
    assert_eq!(storage, [&json!("v1alpha4")]);
    let stored = clusters["status"]["storedVersions"].to_string();
    assert!(stored.contains("v1alpha1"), "{stored}");
}
