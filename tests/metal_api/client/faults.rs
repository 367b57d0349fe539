//! The simulator's fault switches, turned on and off at run time through `/sim/faults`.

use super::*;

/// The simulator's `/sim/faults` switch. One HTTP client for all of a test's switching: with
/// connections dropped, only the connection it already holds still reaches the simulator.
struct Faults {
    http: reqwest::Client,
    url: String,
}

impl Faults {
    fn of(sim: &RunningSim) -> Faults {
        Faults {
            http: reqwest::Client::new(),
            url: format!("{}/sim/faults", sim.url),
        }
    }

    /// Sets the faults (an empty object clears them).
    async fn set(&self, faults: serde_json::Value) {
        let response = self
            .http
            .put(&self.url)
            .json(&faults)
            .send()
            .await
            .expect("faults endpoint");
        assert!(
            response.status().is_success(),
            "{}",
            response.text().await.unwrap_or_default()
        );
    }
}

/// Every answer a 503: reads are retried, then the error is transient and says so.
#[tokio::test]
async fn every_answer_a_503_is_retried_then_transient() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = Faults::of(&sim);
    let client = sim.editor();
    faults.set(serde_json::json!({"error_rate": 1.0})).await;
    let err = client.partitions().await.expect_err("503");
    assert_eq!(
        (err.status(), err.is_transient(), err.category().label()),
        (Some(503), true, "metal_server_error")
    );
    faults.set(serde_json::json!({})).await;
    assert!(client.partitions().await.is_ok());
}

/// Latency beyond the client's timeout.
#[tokio::test]
async fn latency_beyond_the_clients_timeout_is_a_timeout() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = Faults::of(&sim);
    faults.set(serde_json::json!({"latency_ms": 1500})).await;
    let mut config = metal_api::Config::new(
        url::Url::parse(&sim.url).expect("url"),
        metal_api::Auth::Hmac {
            key: "metal-edit".into(),
            auth_type: AuthType::Edit,
        },
    );
    config.timeout = Duration::from_millis(300);
    config.read_attempts = 1;
    let impatient = metal_api::Client::new(config).expect("client");
    let err = impatient.partitions().await.expect_err("timeout");
    assert_eq!(err.category(), Category::Timeout, "{err}");
    faults.set(serde_json::json!({})).await;
}

/// Dropped connections: a fresh client cannot get an answer.
#[tokio::test]
async fn dropped_connections_are_unreachable() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = Faults::of(&sim);
    faults.set(serde_json::json!({"drop_rate": 1.0})).await;
    let fresh = sim.editor();
    let err = fresh.partitions().await.expect_err("dropped");
    assert_eq!(err.category(), Category::Unreachable, "{err}");
    faults.set(serde_json::json!({})).await;
    assert!(sim.editor().partitions().await.is_ok());
}

/// A machine that never phones home, and one that crash-loops; both recover once cleared.
#[tokio::test]
async fn stuck_and_crash_looping_machines_recover_once_cleared() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = Faults::of(&sim);
    let client = sim.editor();
    let network = private_network(&client).await;
    let mut stuck_req = machine_request(&network.id, "ubuntu-26.4");
    stuck_req.uuid = Some("00000000-0000-0000-0000-000000000001".into());
    let mut looping_req = machine_request(&network.id, "ubuntu-26.4");
    looping_req.uuid = Some("00000000-0000-0000-0000-000000000002".into());
    faults
        .set(serde_json::json!({
            "never_phone_home": ["00000000-0000-0000-0000-000000000001"],
            "crash_loop": ["00000000-0000-0000-0000-000000000002"]
        }))
        .await;
    let stuck = client
        .machine_allocate(&stuck_req)
        .await
        .expect("allocated");
    let looping = client
        .machine_allocate(&looping_req)
        .await
        .expect("allocated");
    wait_for_event(&client, &stuck.id, event::BOOTING_NEW_KERNEL).await;
    let crashing = eventually("a crash loop", Duration::from_secs(10), || async {
        let m = client.machine(&looping.id).await.ok()?;
        m.events.crash_loop.then_some(m)
    })
    .await;
    assert!(
        crashing
            .events
            .last_error_event
            .expect("error event")
            .message
            .starts_with("[unexpectedly received in")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        client.machine(&stuck.id).await.expect("get").last_event(),
        Some(event::BOOTING_NEW_KERNEL)
    );
    faults
        .set(serde_json::json!({"dead": ["00000000-0000-0000-0000-000000000001"]}))
        .await;
    let recovered = wait_for_event(&client, &looping.id, event::PHONED_HOME).await;
    assert!(
        !recovered.events.crash_loop,
        "Phoned Home clears the crash loop"
    );
    let phoned = wait_for_event(&client, &stuck.id, event::PHONED_HOME).await;
    assert_eq!(
        phoned.liveliness, "Unknown",
        "a dead, allocated machine's liveliness is Unknown"
    );
}

/// A misspelt fault, or one out of its range, is refused naming the field: a fault test whose
/// fault were silently off would pass without a fault. Nothing is switched on then.
#[tokio::test]
async fn a_misspelt_or_out_of_range_fault_is_refused_naming_the_field() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = Faults::of(&sim);
    let cases = [
        (
            serde_json::json!({"eror_rate": 0.2}),
            "unknown field `eror_rate`",
        ),
        (
            serde_json::json!({"error_rate": 2.0}),
            "error_rate: 2 is not a fraction",
        ),
        (
            serde_json::json!({"dead": ["no-such-machine"]}),
            "dead: the simulator has no machine",
        ),
    ];
    for (body, expected) in cases {
        let response = faults
            .http
            .put(&faults.url)
            .json(&body)
            .send()
            .await
            .expect("faults endpoint");
        assert_eq!(response.status(), 400, "{body}");
        let text = response.text().await.unwrap_or_default();
        assert!(text.contains(expected), "{body}: {text}");
    }
    let now: serde_json::Value = faults
        .http
        .get(&faults.url)
        .send()
        .await
        .expect("faults endpoint")
        .json()
        .await
        .expect("faults");
    assert_eq!(now["error_rate"], 0.0, "nothing switched on: {now}");
}

/// Each fault strikes about as often as it is set to, by the simulator's own count, on a sample
/// large enough that a fault left off fails: a thousand requests, each on a new connection.
#[tokio::test]
async fn every_fault_strikes_about_as_often_as_it_is_set_to() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let faults = metal_sim::state::Faults {
        error_rate: 0.2,
        lost_answer_rate: 0.03,
        timeout_rate: 0.05,
        timeout_ms: Some(50),
        spike_rate: 0.05,
        spike_ms: Some(50),
        drop_rate: 0.05,
        ..Default::default()
    };
    Faults::of(&sim).set(serde_json::json!(faults)).await;
    sim.sim.stats().reset();
    // A new connection for every request, so that each may be dropped.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let url = format!("{}/v1/version", sim.url.trim_end_matches('/'));
    let requests = (0..4).map(|_| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            for _ in 0..250 {
                // Every outcome is a fault or not; the simulator counts which.
                let _ = http.get(&url).send().await;
            }
        }
    });
    futures::future::join_all(requests).await;
    let counts = sim.sim.stats().report().faults;
    let judged = counts.judge(&faults);
    assert!(judged.is_ok(), "{judged:?}");
    assert!(counts.requests >= 900, "{counts:?}");
}
