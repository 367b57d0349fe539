//! metal-api's own swagger spec (v0.44.1) is the simulator's contract: every route it mounts is
//! one of metal-api's, and a scenario over every route (list, find, get, allocate, free, power,
//! reinstall, IPMI, not-found, conflict, exhaustion, auth failures) gets answers the spec's
//! schemas accept.

mod power;

use crate::support;
use capms_test_support::contract;

use contract::{ADMIN, Anonymous, Caller, EDIT, Forged, Spec, VIEW, normalise};
use metal_sim::inventory::{Inventory, SizeImageConstraintSpec};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use support::RunningSim;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const PARTITION: &str = "mini-lab";
const SIZE: &str = "v1-small-x86";
const PUBLIC: &str = "internet-mini-lab";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKv3u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7 capms@test";

#[test]
fn every_mounted_route_is_in_metal_apis_spec() {
    let Some(spec) = Spec::load() else { return };
    let mounted = metal_sim::mounted_routes();
    assert!(
        mounted.len() > 30,
        "the simulator mounts {} routes",
        mounted.len()
    );
    let unknown: Vec<String> = mounted
        .iter()
        .filter(|(method, path)| spec.operation(method.as_str(), path).is_none())
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "routes metal-api's spec does not have: {unknown:#?}"
    );
}

fn allocation(network: &str, image: &str, name: &str) -> Value {
    json!({
        "name": name, "hostname": name, "projectid": PROJECT, "partitionid": PARTITION,
        "sizeid": SIZE, "imageid": image, "ssh_pub_keys": [SSH_KEY],
        "networks": [{"networkid": network, "autoacquire": true}, {"networkid": PUBLIC, "autoacquire": true}],
        "tags": [format!("capms.test/owner=default.{name}")],
        "user_data": "#cloud-config\n",
    })
}

async fn masterdata(c: &mut Caller<'_>) {
    c.expect(200, Anonymous, "GET", "/v1/health", &[], None)
        .await;
    c.expect(200, Anonymous, "GET", "/v1/version", &[], None)
        .await;
    c.expect(200, VIEW, "GET", "/v1/user/me", &[], None).await;
    for (collection, item, known) in [
        ("/v1/partition", "/v1/partition/{id}", PARTITION),
        ("/v1/size", "/v1/size/{id}", SIZE),
        ("/v1/image", "/v1/image/{id}", "debian-13.0"),
        ("/v1/project", "/v1/project/{id}", PROJECT),
    ] {
        c.expect(200, VIEW, "GET", collection, &[], None).await;
        c.expect(200, VIEW, "GET", &format!("{collection}/"), &[], None)
            .await;
        c.expect(200, VIEW, "GET", item, &[known], None).await;
        c.expect(404, VIEW, "GET", item, &["no-such-thing"], None)
            .await;
    }
    let capacity = json!({"projectid": PROJECT});
    c.expect(
        200,
        VIEW,
        "POST",
        "/v1/partition/capacity",
        &[],
        Some(capacity),
    )
    .await;
    let unknown = json!({"id": "no-such-partition"});
    c.expect(
        404,
        VIEW,
        "POST",
        "/v1/partition/capacity",
        &[],
        Some(unknown),
    )
    .await;
    c.expect(
        200,
        VIEW,
        "GET",
        "/v1/image/{id}/latest",
        &["debian-13"],
        None,
    )
    .await;
    c.expect(
        404,
        VIEW,
        "GET",
        "/v1/image/{id}/latest",
        &["gentoo-1"],
        None,
    )
    .await;
    c.expect(
        200,
        VIEW,
        "GET",
        "/v1/image/{id}/query",
        &["debian-13"],
        None,
    )
    .await;
    let find = json!({"features": ["firewall"]});
    let found = c
        .call(VIEW, "POST", "/v1/image/find", &[], Some(find))
        .await;
    assert_eq!(
        found.body.as_array().map(Vec::len),
        Some(1),
        "{}",
        found.body
    );
    let find = json!({"id": PROJECT});
    c.expect(200, VIEW, "POST", "/v1/project/find", &[], Some(find))
        .await;
    size_image_constraints(c).await;
}

/// The lab whose size takes capms's Ubuntu from Kubernetes 1.34 only.
fn constrained_lab() -> Inventory {
    let mut inventory = Inventory::default_lab();
    inventory
        .sizeimageconstraints
        .push(SizeImageConstraintSpec {
            id: SIZE.into(),
            images: [("capms-ubuntu".to_owned(), ">= 1.34".to_owned())].into(),
        });
    inventory
}

/// Anyone reads the constraints; only metal-api's admins may try a pair.
async fn size_image_constraints(c: &mut Caller<'_>) {
    const ONE: &str = "/v1/size-image-constraint/{id}";
    const TRY: &str = "/v1/size-image-constraint/try";
    let all = c
        .call(VIEW, "GET", "/v1/size-image-constraint", &[], None)
        .await;
    assert_eq!(
        all.body[0]["constraints"]["images"]["capms-ubuntu"],
        json!(">= 1.34")
    );
    c.expect(200, VIEW, "GET", ONE, &[SIZE], None).await;
    c.expect(404, VIEW, "GET", ONE, &["no-such-size"], None)
        .await;
    let pair = |size: &str, image: &str| Some(json!({"size": size, "image": image}));
    c.expect(200, ADMIN, "POST", TRY, &[], pair(SIZE, "debian-13"))
        .await;
    c.expect(
        200,
        ADMIN,
        "POST",
        TRY,
        &[],
        pair(SIZE, "capms-ubuntu-1.34"),
    )
    .await;
    let refused = c
        .call(ADMIN, "POST", TRY, &[], pair(SIZE, "capms-ubuntu-1.33"))
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let violation = "does violate image constraint:capms-ubuntu >=1.34";
    assert!(
        refused.body.to_string().contains(violation),
        "{}",
        refused.body
    );
    c.expect(
        404,
        ADMIN,
        "POST",
        TRY,
        &[],
        pair("no-such-size", "debian-13"),
    )
    .await;
    c.expect(404, ADMIN, "POST", TRY, &[], pair(SIZE, "gentoo-1"))
        .await;
    c.expect(400, ADMIN, "POST", TRY, &[], pair(SIZE, "")).await;
    c.expect(403, EDIT, "POST", TRY, &[], pair(SIZE, "debian-13"))
        .await;
}

/// Allocates a private network and returns its id.
async fn networks(c: &mut Caller<'_>) -> String {
    c.expect(200, VIEW, "GET", "/v1/network", &[], None).await;
    c.expect(200, VIEW, "GET", "/v1/network/{id}", &[PUBLIC], None)
        .await;
    c.expect(404, VIEW, "GET", "/v1/network/{id}", &["nope"], None)
        .await;
    let find = json!({"labels": {"network.metal-stack.io/default": ""}});
    c.expect(200, VIEW, "POST", "/v1/network/find", &[], Some(find))
        .await;
    let request = json!({"projectid": PROJECT, "partitionid": PARTITION, "name": "contract"});
    let network = c
        .call(EDIT, "POST", "/v1/network/allocate", &[], Some(request))
        .await;
    assert_eq!(network.status, 201, "{}", network.body);
    let unknown = json!({"projectid": PROJECT, "partitionid": "nowhere"});
    c.expect(
        404,
        EDIT,
        "POST",
        "/v1/network/allocate",
        &[],
        Some(unknown),
    )
    .await;
    let viewer = json!({"projectid": PROJECT, "partitionid": PARTITION});
    c.expect(403, VIEW, "POST", "/v1/network/allocate", &[], Some(viewer))
        .await;
    network.body["id"].as_str().expect("network id").to_owned()
}

async fn ips(c: &mut Caller<'_>) {
    c.expect(200, VIEW, "GET", "/v1/ip", &[], None).await;
    let request =
        json!({"networkid": PUBLIC, "projectid": PROJECT, "type": "ephemeral", "name": "cp"});
    let ip = c
        .call(EDIT, "POST", "/v1/ip/allocate", &[], Some(request))
        .await;
    assert_eq!(ip.status, 201, "{}", ip.body);
    let address = ip.body["ipaddress"].as_str().expect("address").to_owned();
    c.expect(200, VIEW, "GET", "/v1/ip/{id}", &[&address], None)
        .await;
    let find = json!({"projectid": PROJECT, "networkid": PUBLIC});
    c.expect(200, VIEW, "POST", "/v1/ip/find", &[], Some(find))
        .await;
    let specific = json!({"networkid": PUBLIC, "projectid": PROJECT, "type": "static"});
    let first = c
        .call(
            EDIT,
            "POST",
            "/v1/ip/allocate/{ip}",
            &["127.100.0.200"],
            Some(specific.clone()),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let again = c
        .call(
            EDIT,
            "POST",
            "/v1/ip/allocate/{ip}",
            &["127.100.0.200"],
            Some(specific),
        )
        .await;
    assert_eq!(
        again.status, 409,
        "a taken address is a conflict: {}",
        again.body
    );
    for a in [address.as_str(), "127.100.0.200"] {
        c.expect(200, EDIT, "DELETE", "/v1/ip/free/{id}", &[a], None)
            .await;
    }
    c.expect(
        404,
        EDIT,
        "DELETE",
        "/v1/ip/free/{id}",
        &["127.100.0.200"],
        None,
    )
    .await;
    c.expect(404, VIEW, "GET", "/v1/ip/{id}", &[&address], None)
        .await;
}

/// Allocates machines until none is left, then frees them; returns nothing allocated.
async fn machines(c: &mut Caller<'_>, network: &str) {
    c.expect(200, VIEW, "GET", "/v1/machine", &[], None).await;
    let forged = c
        .call(
            Forged,
            "POST",
            "/v1/machine/allocate",
            &[],
            Some(allocation(network, "debian-13", "forged")),
        )
        .await;
    assert_eq!(forged.status, 403, "a wrong HMAC is refused");
    let viewer = c
        .call(
            VIEW,
            "POST",
            "/v1/machine/allocate",
            &[],
            Some(allocation(network, "debian-13", "viewer")),
        )
        .await;
    assert_eq!(viewer.status, 403, "viewers cannot allocate");
    let allocated = allocate_until_exhausted(c, network).await;
    let first = allocated[0].clone();
    c.expect(200, VIEW, "GET", "/v1/machine/{id}", &[&first], None)
        .await;
    let find =
        json!({"allocation_project": PROJECT, "tags": ["capms.test/owner=default.worker-0"]});
    let found = c
        .call(VIEW, "POST", "/v1/machine/find", &[], Some(find))
        .await;
    assert_eq!(
        found.body.as_array().map(Vec::len),
        Some(1),
        "{}",
        found.body
    );
    c.expect(200, VIEW, "GET", "/v1/machine/issues", &[], None)
        .await;
    let evaluate = json!({"only": [], "omit": [], "severity": "", "last_error_threshold": 0});
    c.expect(
        200,
        VIEW,
        "POST",
        "/v1/machine/issues/evaluate",
        &[],
        Some(evaluate),
    )
    .await;
    let ip = found.body[0]["allocation"]["networks"][0]["ips"][0]
        .as_str()
        .expect("machine ip")
        .to_owned();
    let scoped = c
        .call(EDIT, "DELETE", "/v1/ip/free/{id}", &[&ip], None)
        .await;
    assert_eq!(
        scoped.status, 400,
        "an IP with machine scope cannot be freed: {}",
        scoped.body
    );
    c.expect(404, VIEW, "GET", "/v1/firewall/{id}", &[&first], None)
        .await;
    power::allocated(c, &first).await;
    for id in &allocated {
        c.expect(200, EDIT, "DELETE", "/v1/machine/{id}/free", &[id], None)
            .await;
    }
    power::freed(c, &first).await;
    c.expect(
        404,
        EDIT,
        "DELETE",
        "/v1/machine/{id}/free",
        &["nope"],
        None,
    )
    .await;
    c.expect(404, VIEW, "GET", "/v1/machine/{id}", &["nope"], None)
        .await;
}

/// Allocates machines until metal-api has none left (422); returns their ids.
async fn allocate_until_exhausted(c: &mut Caller<'_>, network: &str) -> Vec<String> {
    let mut allocated = Vec::new();
    let exhausted = loop {
        let name = format!("worker-{}", allocated.len());
        let answer = c
            .call(
                EDIT,
                "POST",
                "/v1/machine/allocate",
                &[],
                Some(allocation(network, "debian-13", &name)),
            )
            .await;
        if answer.status != 200 {
            break answer;
        }
        allocated.push(answer.body["id"].as_str().expect("id").to_owned());
        assert!(allocated.len() <= 6, "the lab has six machines");
    };
    assert_eq!(
        exhausted.status, 422,
        "no machine available: {}",
        exhausted.body
    );
    allocated
}

/// Allocates a firewall once machines are back in the pool, and frees it.
async fn firewalls(c: &mut Caller<'_>, network: &str) {
    c.expect(200, VIEW, "GET", "/v1/firewall", &[], None).await;
    let mut request = allocation(network, "firewall-ubuntu-3.0", "firewall");
    request["firewall_rules"] = json!({"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "https"}]});
    let deadline = std::time::Instant::now() + support::LOADED_MACHINE_WAIT;
    let firewall = loop {
        let answer = c
            .call(
                EDIT,
                "POST",
                "/v1/firewall/allocate",
                &[],
                Some(request.clone()),
            )
            .await;
        if answer.status == 200 || std::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(firewall.status, 200, "{}", firewall.body);
    let id = firewall.body["id"].as_str().expect("id").to_owned();
    c.expect(200, VIEW, "GET", "/v1/firewall/{id}", &[&id], None)
        .await;
    let find = json!({"allocation_project": PROJECT});
    let found = c
        .call(VIEW, "POST", "/v1/firewall/find", &[], Some(find))
        .await;
    assert_eq!(
        found.body.as_array().map(Vec::len),
        Some(1),
        "{}",
        found.body
    );
    let mut bad = request.clone();
    bad["firewall_rules"] =
        json!({"egress": [{"protocol": "icmp", "ports": [1], "to": ["0.0.0.0/0"]}]});
    c.expect(400, EDIT, "POST", "/v1/firewall/allocate", &[], Some(bad))
        .await;
    c.expect(200, EDIT, "DELETE", "/v1/machine/{id}/free", &[&id], None)
        .await;
}

/// Frees the network once the machines' IPs are released (422 until then), with both verbs.
async fn free_networks(c: &mut Caller<'_>, network: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = c
            .call(EDIT, "DELETE", "/v1/network/free/{id}", &[network], None)
            .await;
        if answer.status == 200 {
            break;
        }
        assert_eq!(answer.status, 422, "busy prefixes are 422: {}", answer.body);
        assert!(std::time::Instant::now() < deadline, "network never freed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let request = json!({"projectid": PROJECT, "partitionid": PARTITION});
    let other = c
        .call(EDIT, "POST", "/v1/network/allocate", &[], Some(request))
        .await;
    let other = other.body["id"].as_str().expect("id").to_owned();
    c.expect(200, EDIT, "POST", "/v1/network/free/{id}", &[&other], None)
        .await;
    c.expect(
        404,
        EDIT,
        "DELETE",
        "/v1/network/free/{id}",
        &[&other],
        None,
    )
    .await;
}

#[tokio::test]
async fn every_answer_of_a_scenario_over_every_route_matches_the_spec() {
    let Some(spec) = Spec::load() else { return };
    let sim = RunningSim::start(constrained_lab(), "/metal").await;
    let mut c = Caller::new(&spec, &sim.url);
    masterdata(&mut c).await;
    let network = networks(&mut c).await;
    ips(&mut c).await;
    machines(&mut c, &network).await;
    firewalls(&mut c, &network).await;
    free_networks(&mut c, &network).await;

    // Unknown routes and methods answer as go-restful does.
    let unknown = c.send(VIEW, "GET", "/v1/no-such-route", None).await;
    assert_eq!(unknown.status, 404);
    let wrong = c.send(VIEW, "PATCH", "/v1/machine", None).await;
    assert_eq!(wrong.status, 405);
    for answer in [unknown, wrong] {
        let inner: Value =
            serde_json::from_str(answer.body.as_str().expect("wrapped")).expect("inner json");
        assert_eq!(inner["statuscode"], json!(answer.status));
    }

    let mounted: BTreeSet<(String, String)> = metal_sim::mounted_routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), normalise(&p)))
        .collect();
    let missed: Vec<_> = mounted.difference(&c.exercised).collect();
    assert!(
        missed.is_empty(),
        "routes the scenario did not exercise: {missed:#?}"
    );
    assert!(
        c.violations.is_empty(),
        "answers that violate metal-api's spec:\n{}",
        c.violations.join("\n")
    );
}

#[tokio::test]
async fn sim_stats_count_requests_by_route_template() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let client = sim.editor();
    let http = reqwest::Client::new();
    let stats_url = format!("{}/sim/stats", sim.url.trim_end_matches("/metal"));
    http.delete(&stats_url).send().await.expect("reset");
    for _ in 0..3 {
        client
            .machine("00000000-0000-0000-0000-000000000001")
            .await
            .expect("machine");
    }
    let _ = client.machine("nope").await;
    let report: metal_sim::stats::StatsReport = http
        .get(&stats_url)
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    let count = |status: u16| {
        report
            .requests
            .iter()
            .find(|r| r.route == "/v1/machine/{id}" && r.method == "GET" && r.status == status)
            .map_or(0, |r| r.count)
    };
    assert_eq!((count(200), count(404)), (3, 1), "{report:?}");
    assert_eq!(report.total, 4);
}
