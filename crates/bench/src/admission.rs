//! The admission benchmark: AdmissionReviews over TLS straight to capms's webhook server at a
//! fixed rate, with a warm catalog; latency percentiles, errors and metal-api calls meanwhile.

use crate::Args;
use crate::report::{Admission, percentiles};
use crate::support::{CapmsManager, ControlPlane, RunningSim};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PATH: &str = "/validate-infrastructure-cluster-x-k8s-io-v1alpha4-metalstackmachine";

/// A MetalStackMachine a user creates: checked against the catalog (size, image, partition).
fn review(i: u64) -> Value {
    let group = "infrastructure.cluster.x-k8s.io";
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "kind": {"group": group, "version": "v1alpha4", "kind": "MetalStackMachine"},
            "resource": {"group": group, "version": "v1alpha4", "resource": "metalstackmachines"},
            "name": format!("bench-{i}"), "namespace": "bench",
            "operation": "CREATE", "userInfo": {"username": "bench"},
            "object": {
                "apiVersion": format!("{group}/v1alpha4"), "kind": "MetalStackMachine",
                "metadata": {"name": format!("bench-{i}"), "namespace": "bench"},
                "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
            }
        }
    })
}

fn https_client() -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&ControlPlane::shared().ca_pem()).expect("CA");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// One review: its latency, or None when it failed or was not allowed.
async fn send(client: &reqwest::Client, url: &str, i: u64) -> Option<Duration> {
    let started = Instant::now();
    let answer = client.post(url).json(&review(i)).send().await.ok()?;
    let body: Value = answer.error_for_status().ok()?.json().await.ok()?;
    let elapsed = started.elapsed();
    (body["response"]["allowed"] == json!(true)).then_some(elapsed)
}

pub async fn run(args: &Args, capms: &CapmsManager, sim: &RunningSim) -> Admission {
    let client = https_client();
    let url = format!("https://127.0.0.1:{}{PATH}", capms.webhook_port);
    // Warm the catalog and the connections; a first answer must be an admission.
    for i in 0..20 {
        assert!(
            send(&client, &url, i).await.is_some(),
            "bench: the webhook server does not admit a valid MetalStackMachine"
        );
    }
    sim.sim.stats().reset();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(0u64));
    let total = u64::from(args.admission_rate) * args.admission_seconds;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / args.admission_rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        tick.tick().await;
        let (client, url) = (client.clone(), url.clone());
        let (latencies, errors) = (latencies.clone(), errors.clone());
        tasks.spawn(async move {
            match send(&client, &url, 1000 + i).await {
                Some(l) => latencies.lock().expect("lock").push(l),
                None => *errors.lock().expect("lock") += 1,
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let seconds = started.elapsed().as_secs_f64();
    let metal_calls = sim.sim.stats().report().total;
    let mut latencies = latencies.lock().expect("lock").clone();
    let errors = *errors.lock().expect("lock");
    Admission {
        rate: args.admission_rate,
        seconds,
        requests: total,
        achieved_rate: total as f64 / seconds,
        errors,
        latency_ms: percentiles(&mut latencies),
        metal_calls,
    }
}
