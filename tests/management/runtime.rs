//! The manager runtime is a library function: a test starts it in-process against the real
//! control plane and the in-process simulator, sees it become ready (certificate loaded, leader,
//! caches synced), reads `/metrics` over HTTPS as an authorized service account (and is refused
//! without a token or without the right), and stops it through its shutdown future.

use crate::support;

use capms::runtime::{LeaderElection, ManagerConfig, run_manager};
use futures::FutureExt;
use std::net::SocketAddr;
use std::time::Duration;
use support::{ControlPlane, RunningSim, free_port};

#[tokio::test]
async fn the_manager_runs_in_process_and_stops_on_shutdown() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("runtime").await;
    let sim = RunningSim::start(metal_sim::inventory::Inventory::default_lab(), "/metal").await;
    let certs = tempfile::tempdir().expect("tempdir");
    cp.issue_serving_cert(certs.path());
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let auth = metal_api::Auth::Hmac {
        key: "metal-edit".into(),
        auth_type: metal_api::hmac::AuthType::Edit,
    };
    let health_addr = loopback(free_port());
    let metrics_addr = loopback(free_port());
    let config = ManagerConfig {
        kubeconfig: Some(cp.kubeconfig.clone()),
        metal: metal_api::Config::new(sim.url.parse().expect("url"), auth),
        namespace: Some(ns.name.clone()),
        watch_filter: None,
        leader_election: Some(LeaderElection {
            namespace: ns.name.clone(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(1),
        }),
        concurrency: 4,
        sync_period: capms::reconciler::DEFAULT_SYNC_PERIOD,
        firewall_rollout_deadline: capms::reconciler::DEFAULT_FIREWALL_ROLLOUT_DEADLINE,
        machine_set_wait: capms::reconciler::DEFAULT_MACHINE_SET_WAIT,
        handoff_window: capms::reconciler::DEFAULT_HANDOFF_WINDOW,
        orphan_sweep_interval: Duration::from_secs(300),
        orphan_grace: Duration::from_secs(600),
        health_addr,
        metrics_addr,
        metrics_secure: true,
        metrics_cert_dir: certs.path().to_owned(),
        webhook_addr: loopback(free_port()),
        webhook_cert_dir: certs.path().to_owned(),
        deny_when_metal_unreachable: false,
        catalog_refresh: Duration::from_secs(30),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    }
    .boxed()
    .shared();
    let manager = tokio::spawn(run_manager(config, shutdown));

    let readyz = format!("http://{health_addr}/readyz");
    let deadline = tokio::time::Instant::now() + support::LOADED_MACHINE_WAIT;
    loop {
        let status = reqwest::get(&readyz)
            .await
            .ok()
            .map(|r| r.status().as_u16());
        if status == Some(200) {
            break;
        }
        assert!(
            !manager.is_finished(),
            "the manager stopped before it was ready"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready after {:?}: {status:?}",
            support::LOADED_MACHINE_WAIT
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    check_secure_metrics(cp, &ns.name, metrics_addr).await;

    stop.send(()).expect("the manager listens");
    // Kubernetes allows a pod 30 s to stop; on a loaded machine twice that.
    let result = tokio::time::timeout(Duration::from_secs(60), manager)
        .await
        .expect("the manager stops within 60 s of shutdown")
        .expect("the task did not panic");
    assert!(result.is_ok(), "{result:?}");
}

/// A token of a fresh service account in `namespace`, optionally bound to capms-metrics-reader.
fn service_account_token(cp: &ControlPlane, namespace: &str, name: &str, reader: bool) -> String {
    cp.kubectl(&["create", "serviceaccount", name, "-n", namespace], &[]);
    if reader {
        let binding = format!("{namespace}-{name}");
        let subject = format!("{namespace}:{name}");
        cp.kubectl(
            &[
                "create",
                "clusterrolebinding",
                &binding,
                "--clusterrole=capms-metrics-reader",
                "--serviceaccount",
                &subject,
            ],
            &[],
        );
    }
    cp.kubectl(&["create", "token", name, "-n", namespace], &[])
        .trim()
        .to_owned()
}

async fn check_secure_metrics(cp: &ControlPlane, namespace: &str, addr: SocketAddr) {
    cp.apply(&support::repo_root().join("manifests/rbac/metrics-reader.yaml"));
    let reader = service_account_token(cp, namespace, "scraper", true);
    let stranger = service_account_token(cp, namespace, "stranger", false);
    capms::tls::install_default_provider();
    let ca = reqwest::Certificate::from_pem(&cp.ca_pem()).expect("CA");
    let http = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .expect("client");
    let url = format!("https://{addr}/metrics");
    let get = |token: Option<&str>| {
        let mut request = http.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.expect("metrics answers over TLS");
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    assert_eq!(get(None).await.0, 401, "no token");
    assert_eq!(get(Some("not-a-token")).await.0, 401, "an invalid token");
    assert_eq!(
        get(Some(&stranger)).await.0,
        403,
        "a user without the right"
    );
    let (status, text) = get(Some(&reader)).await;
    assert_eq!(status, 200, "{text}");
    // The admission catalog was fetched from the simulator on start.
    assert!(
        text.contains("capms_metal_api_requests_total{endpoint=\"partition_list\",status=\"200\"}"),
        "{text}"
    );
    for queue in [
        "metalstackcluster",
        "metalstackfirewall",
        "metalstackmachine",
    ] {
        for series in ["workqueue_depth", "workqueue_adds_total"] {
            let line = format!("{series}{{name=\"{queue}\"}} ");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }
    cp.kubectl(
        &[
            "delete",
            "clusterrolebinding",
            &format!("{namespace}-scraper"),
        ],
        &[],
    );
}
