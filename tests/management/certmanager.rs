//! A cert-manager-backed install, for real: cert-manager's controller and cainjector (built from
//! the Go module proxy) issue the webhook certificate of our components and inject its CA into
//! our webhook configurations; capms serves that certificate and the apiserver, trusting only the
//! injected caBundle, calls our webhooks.

use crate::support;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use metal_sim::inventory::Inventory;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use std::process::Command;
use std::time::Duration;
use support::{
    CapmsManager, ChildProcess, ControlPlane, RunningSim, binaries, eventually, free_port,
    repo_root,
};

const NS: &str = "capms-system";

#[tokio::test(flavor = "current_thread")]
async fn cert_manager_issues_and_injects_and_the_apiserver_calls_our_webhooks() {
    capms::tls::install_default_provider();
    // A control plane of its own: the components install cluster-wide webhook configurations,
    // which would send the other tests' objects to this test's manager once it has stopped.
    let cp = &ControlPlane::management("certmanager");
    let client = cp.client().await;
    let work = tempfile::tempdir().expect("dir");
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let _cert_manager = start_cert_manager(cp, work.path());
    install_components(cp, work.path(), &sim.url);
    let (cert_dir, ca) = issued_serving_certificate(&client, work.path()).await;
    ca_injected(&client, &ca).await;

    // capms serves the issued certificate on loopback.
    let capms = CapmsManager::start(
        "capms",
        "capms-e2e",
        &sim.url,
        &cert_dir,
        work.path(),
        &[format!("--leader-election-namespace={NS}")],
    );
    capms.wait_ready().await;
    point_webhooks_at_loopback(cp, &client, capms.webhook_port).await;
    the_apiserver_calls_our_webhooks(cp, work.path(), &capms);
}

/// cert-manager's CRDs, controller and cainjector.
fn start_cert_manager(cp: &ControlPlane, work: &Path) -> [ChildProcess; 2] {
    cp.apply(&binaries().cert_manager.join("crd"));
    cp.wait_crds_established();
    let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig.display());
    let controller = ChildProcess::spawn(
        "cert-manager-controller",
        &binaries().cert_manager_bin.join("controller"),
        &[
            kubeconfig.clone(),
            "--leader-elect=false".into(),
            format!("--metrics-listen-address=127.0.0.1:{}", free_port()),
            format!("--cluster-resource-namespace={NS}"),
        ],
        &[],
        work,
    );
    let cainjector = ChildProcess::spawn(
        "cert-manager-cainjector",
        &binaries().cert_manager_bin.join("cainjector"),
        &[kubeconfig, "--leader-elect=false".into()],
        &[],
        work,
    );
    [controller, cainjector]
}

/// Our components, as clusterctl would process them. No kubelet runs here, so the apiserver
/// reaches capms on loopback: the Certificate also names 127.0.0.1, which the URL uses.
fn install_components(cp: &ControlPlane, work: &Path, metal_api: &str) {
    let release = work.join("release");
    let out = Command::new("bash")
        .arg(repo_root().join("manifests/release.sh"))
        .arg(&release)
        .output()
        .expect("release.sh");
    assert!(out.status.success());
    let home = tempfile::tempdir().expect("home");
    let processed = support::clusterctl::clusterctl_command()
        .args(["generate", "yaml", "--from"])
        .arg(release.join("infrastructure-components.yaml"))
        .env("HOME", home.path())
        .env("METAL_API_URL", metal_api)
        .env("METAL_API_HMAC", "metal-edit")
        .output()
        .expect("clusterctl");
    assert!(
        processed.status.success(),
        "{}",
        String::from_utf8_lossy(&processed.stderr)
    );
    let components = String::from_utf8_lossy(&processed.stdout).replace(
        "  - capms-webhook-service.capms-system.svc.cluster.local\n",
        "  - capms-webhook-service.capms-system.svc.cluster.local\n  ipAddresses:\n  - 127.0.0.1\n",
    );
    assert!(
        components.contains("ipAddresses"),
        "the Certificate names 127.0.0.1 too"
    );
    let file = work.join("components.yaml");
    std::fs::write(&file, components).expect("write");
    cp.apply(&file);
}

/// cert-manager issues the serving certificate into the Secret our Deployment mounts; it is
/// copied where capms reads it, as the kubelet's Secret mount would. Returns that directory and
/// the CA.
async fn issued_serving_certificate(client: &kube::Client, work: &Path) -> (PathBuf, Vec<u8>) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret = eventually(
        "cert-manager to issue capms-webhook-service-cert",
        Duration::from_secs(90),
        || async {
            let s = secrets.get_opt("capms-webhook-service-cert").await.ok()??;
            let data = s.data.clone()?;
            (data.contains_key("tls.crt")
                && data.contains_key("tls.key")
                && data.contains_key("ca.crt"))
            .then_some(data)
        },
    )
    .await;
    // Copy it where capms reads it, as the kubelet's Secret mount would.
    let cert_dir = work.join("serving-certs");
    std::fs::create_dir_all(&cert_dir).expect("dir");
    for key in ["tls.crt", "tls.key"] {
        std::fs::write(cert_dir.join(key), &secret[key].0).expect("write");
    }
    (cert_dir, secret["ca.crt"].0.clone())
}

/// cainjector puts the CA into both webhook configurations.
async fn ca_injected(client: &kube::Client, ca: &[u8]) {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    eventually(
        "cainjector to inject the CA",
        Duration::from_secs(60),
        || async {
            let m = mutating
                .get("capms-mutating-webhook-configuration")
                .await
                .ok()?;
            let v = validating
                .get("capms-validating-webhook-configuration")
                .await
                .ok()?;
            let injected =
                |cfgs: Vec<Option<Vec<u8>>>| cfgs.iter().all(|c| c.as_deref() == Some(ca));
            let m_ok = injected(
                m.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.client_config.ca_bundle.map(|b| b.0))
                    .collect(),
            );
            let v_ok = injected(
                v.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.client_config.ca_bundle.map(|b| b.0))
                    .collect(),
            );
            (m_ok && v_ok).then_some(())
        },
    )
    .await;
}

/// Points the webhooks at the loopback URL instead of the Service; the injected caBundle stays.
async fn point_webhooks_at_loopback(cp: &ControlPlane, client: &kube::Client, webhook_port: u16) {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for (kind, api_name) in [
        ("mutating", "capms-mutating-webhook-configuration"),
        ("validating", "capms-validating-webhook-configuration"),
    ] {
        let current: Value = serde_json::from_str(&cp.kubectl(
            &[
                "get",
                &format!("{kind}webhookconfiguration"),
                api_name,
                "-o",
                "json",
            ],
            &[],
        ))
        .expect("json");
        let mut ops = Vec::new();
        for (i, w) in current["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .enumerate()
        {
            let path = w["clientConfig"]["service"]["path"].as_str().expect("path");
            ops.push(
                json!({"op": "remove", "path": format!("/webhooks/{i}/clientConfig/service")}),
            );
            ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/url"), "value": format!("https://127.0.0.1:{webhook_port}{path}")}));
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch");
        let params = PatchParams::default();
        if kind == "mutating" {
            mutating
                .patch(api_name, &params, &Patch::<()>::Json(patch))
                .await
                .expect("patch mutating");
        } else {
            validating
                .patch(api_name, &params, &Patch::<()>::Json(patch))
                .await
                .expect("patch validating");
        }
    }
    let still: Value = serde_json::from_str(&cp.kubectl(
        &[
            "get",
            "validatingwebhookconfiguration",
            "capms-validating-webhook-configuration",
            "-o",
            "json",
        ],
        &[],
    ))
    .expect("json");
    assert!(
        still["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|b| !b.is_empty()),
        "the injected CA is what the apiserver trusts"
    );
}

/// The apiserver calls our webhooks over TLS it verifies with cert-manager's CA.
fn the_apiserver_calls_our_webhooks(cp: &ControlPlane, work: &Path, capms: &CapmsManager) {
    cp.kubectl(&["create", "namespace", "capms-e2e"], &[]);
    let bad = work.join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": "bad", "namespace": "capms-e2e"}, "spec": {"image": "ubuntu-26.4", "machineType": "m2-tiny"}})).expect("json")).expect("write");
    let refused = cp.kubectl_output(&["apply", "-f"], &[bad]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "denied");
    assert!(stderr.contains("spec.machineType: machine type \"m2-tiny\" is not a metal-stack size; valid: v1-small-x86"), "{stderr}\ncapms:\n{}", capms.process.log_tail());
    let good = work.join("good.json");
    std::fs::write(&good, serde_json::to_vec(&json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": "good", "namespace": "capms-e2e"}, "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86", "partition": "mini-lab"}})).expect("json")).expect("write");
    let admitted = cp.kubectl_output(&["apply", "-f"], &[good]);
    assert!(
        admitted.status.success(),
        "{}",
        String::from_utf8_lossy(&admitted.stderr)
    );
}
