//! The webhook certificate rotates while admission requests arrive: through the apiserver (which
//! keeps its connections) and from clients that open a new TLS connection for every request, so
//! every rotation meets handshakes. The files are swapped one by one, key first, as a plain
//! rename-based writer does; between the two renames the pair on disk does not match, and the
//! server must keep serving the last good pair. No request may fail.

use super::*;
use kube::api::{Api, DynamicObject, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const ROTATIONS: usize = 12;

/// What the requesters saw: answers and failures (each failure as its message).
#[derive(Default)]
struct Tally {
    answered: AtomicUsize,
    failures: std::sync::Mutex<Vec<String>>,
    /// The apiserver's own refusals that never reached the webhook (a loaded shared control
    /// plane's 429 or timeout): not the webhook's, so not failures here.
    unrelated: AtomicUsize,
}

impl Tally {
    fn record(&self, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.answered.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) if e.starts_with("apiserver:") && !e.contains("failed calling webhook") => {
                self.unrelated.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => self.failures.lock().expect("tally").push(e),
        }
    }
}

/// A dry-run create of a good MetalStackCluster: the apiserver calls both webhooks.
async fn through_the_apiserver(api: &Api<DynamicObject>, n: usize) -> Result<(), String> {
    let mut cluster = lab_cluster(&format!("rotating-{n}"), "internet-mini-lab", json!({}));
    cluster["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha4");
    cluster["metadata"]["namespace"] = json!(api.namespace().unwrap_or_default());
    let object: DynamicObject = serde_json::from_value(cluster).map_err(|e| e.to_string())?;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry_run, &object)
        .await
        .map(|_| ())
        .map_err(|e| format!("apiserver: {e}"))
}

/// The same review sent straight to the validating webhook on a connection of its own.
async fn on_a_new_connection(port: u16, ca: &[u8], n: usize) -> Result<(), String> {
    let ca = reqwest::Certificate::from_pem(ca).map_err(|e| e.to_string())?;
    let http = reqwest::Client::builder()
        .add_root_certificate(ca)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let route = capms::webhooks::Route {
        kind: capms::webhooks::AdmittedKind::Cluster,
        phase: capms::webhooks::AdmissionPhase::Validating,
    };
    let name = format!("direct-{n}");
    let mut object = lab_cluster(
        &name,
        "internet-mini-lab",
        json!({"host": "127.100.0.9", "port": 6443}),
    );
    object["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha4");
    object["metadata"]["namespace"] = json!("default");
    let group = "infrastructure.cluster.x-k8s.io";
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": format!("00000000-0000-4000-8000-{n:012}"),
            "kind": {"group": group, "version": "v1alpha4", "kind": "MetalStackCluster"},
            "resource": {"group": group, "version": "v1alpha4", "resource": "metalstackclusters"},
            "name": name, "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "rotation"}, "object": object, "dryRun": true}});
    let url = format!("https://127.0.0.1:{port}{}", route.path());
    let response = http
        .post(&url)
        .json(&review)
        .send()
        .await
        .map_err(|e| format!("direct: {e:?}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("direct answer: {e}"))?;
    match body.pointer("/response/allowed") {
        Some(Value::Bool(true)) if status.is_success() => Ok(()),
        _ => Err(format!("direct: {status} {body}")),
    }
}

/// Swaps in a new certificate of the control plane's CA, key first, each file by rename.
fn rotate(cp: &ControlPlane, cert_dir: &Path, next: &Path) {
    let _ = std::fs::remove_dir_all(next);
    cp.issue_serving_cert(next);
    for f in ["tls.key", "tls.crt"] {
        let staged = cert_dir.join(format!("{f}.new"));
        std::fs::copy(next.join(f), &staged).expect("copy");
        std::fs::rename(&staged, cert_dir.join(f)).expect("rename");
        // Long enough that handshakes land between the two renames.
        std::thread::sleep(Duration::from_millis(150));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_rotates_while_admission_requests_arrive_and_none_fails() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("rotation").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let work = tempfile::tempdir().expect("temp dir");
    let manager = registered_manager(
        ("capms-rotation", "capms-rotation-manager"),
        &ns.name,
        &sim.url,
        work.path(),
    )
    .await;
    let cert_dir = work.path().join("certs");

    let gvk = kube::api::GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha4",
        "MetalStackCluster",
    );
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "metalstackclusters");
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    // The registration is in place once a request is answered.
    support::eventually_seen(
        "the apiserver to call the webhooks",
        Duration::from_secs(180),
        || through_the_apiserver(&api, 0),
    )
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut requesters = Vec::new();
    for lane in 0..2 {
        let (stop, tally, api) = (stop.clone(), tally.clone(), api.clone());
        requesters.push(tokio::spawn(async move {
            let mut n = lane;
            while !stop.load(Ordering::SeqCst) {
                tally.record(through_the_apiserver(&api, n).await);
                n += 2;
            }
        }));
    }
    for lane in 0..2 {
        let (stop, tally, ca) = (stop.clone(), tally.clone(), cp.ca_pem());
        let port = manager.webhook_port;
        requesters.push(tokio::spawn(async move {
            let mut n = lane;
            while !stop.load(Ordering::SeqCst) {
                tally.record(on_a_new_connection(port, &ca, n).await);
                n += 2;
            }
        }));
    }

    let mut serials = vec![served_serial(manager.webhook_port)];
    for i in 0..ROTATIONS {
        let next = work.path().join(format!("next-{i}"));
        let (cp_dir, certs) = (next.clone(), cert_dir.clone());
        tokio::task::spawn_blocking(move || rotate(ControlPlane::shared(), &certs, &cp_dir))
            .await
            .expect("rotation");
        let expected = file_serial(&next.join("tls.crt"));
        let port = manager.webhook_port;
        let served = eventually(
            "the new certificate served",
            Duration::from_secs(60),
            || {
                let expected = expected.clone();
                async move {
                    let served = tokio::task::spawn_blocking(move || served_serial(port))
                        .await
                        .ok()?;
                    (served == expected).then_some(served)
                }
            },
        )
        .await;
        serials.push(served);
    }
    stop.store(true, Ordering::SeqCst);
    for r in requesters {
        r.await.expect("requester");
    }

    let failures = tally.failures.lock().expect("tally").clone();
    let answered = tally.answered.load(Ordering::SeqCst);
    serials.dedup();
    assert_eq!(
        serials.len(),
        ROTATIONS + 1,
        "every rotation served: {serials:?}"
    );
    assert!(
        failures.is_empty(),
        "{} of {} admission requests failed during {ROTATIONS} rotations:\n{}\ncapms's log:\n{}",
        failures.len(),
        failures.len() + answered,
        failures.join("\n"),
        manager.process.log_tail()
    );
    assert!(
        answered >= 4 * ROTATIONS,
        "only {answered} requests were answered"
    );
    // The test means something only if handshakes came while the pair on disk did not match.
    let mid_rotation = manager
        .process
        .log_text()
        .matches("tls_key_mismatch")
        .count();
    assert!(
        mid_rotation > 0,
        "no handshake met a half-rotated pair; capms's log:\n{}",
        manager.process.log_tail()
    );
    let unrelated = tally.unrelated.load(Ordering::SeqCst);
    eprintln!(
        "{answered} admission requests answered during {ROTATIONS} certificate rotations, {mid_rotation} handshakes mid-rotation served the last good pair; none failed ({unrelated} refused by the apiserver itself)"
    );
}
