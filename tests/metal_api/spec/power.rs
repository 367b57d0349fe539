//! The machine power, reinstall and IPMI routes in the scenario over every route: each power
//! action, a reinstall and its refusals, and the IPMI view with its loopback BMC addresses.

use super::*;

/// Every power route's last segment.
const ACTIONS: [&str; 9] = [
    "off",
    "on",
    "reset",
    "cycle",
    "bios",
    "disk",
    "pxe",
    "chassis-identify-led-on",
    "chassis-identify-led-off",
];

/// On an allocated `machine`: every power action, a reinstall, the IPMI view.
pub(super) async fn allocated(c: &mut Caller<'_>, machine: &str) {
    for action in ACTIONS {
        let template = format!("/v1/machine/{{id}}/power/{action}");
        let answer = c
            .expect(200, EDIT, "POST", &template, &[machine], Some(json!({})))
            .await;
        assert_eq!(answer.body["id"], json!(machine), "{action}");
    }
    let cycle = "/v1/machine/{id}/power/cycle";
    let answer = c
        .expect(200, EDIT, "POST", cycle, &[machine], Some(json!({})))
        .await;
    assert_eq!(
        answer.body["events"]["log"][0]["event"],
        json!("Planned Reboot")
    );
    c.expect(404, EDIT, "POST", cycle, &["nope"], Some(json!({})))
        .await;
    c.expect(403, VIEW, "POST", cycle, &[machine], Some(json!({})))
        .await;
    let reinstall = "/v1/machine/{id}/reinstall";
    let request = |image: &str| Some(json!({"id": machine, "imageid": image}));
    let answer = c
        .expect(
            200,
            EDIT,
            "POST",
            reinstall,
            &[machine],
            request("debian-13"),
        )
        .await;
    assert_eq!(answer.body["allocation"]["reinstall"], json!(true));
    c.expect(
        400,
        EDIT,
        "POST",
        reinstall,
        &[machine],
        request("gentoo-1"),
    )
    .await;
    c.expect(
        404,
        EDIT,
        "POST",
        reinstall,
        &["nope"],
        request("debian-13"),
    )
    .await;
    ipmi(c, machine).await;
}

async fn ipmi(c: &mut Caller<'_>, machine: &str) {
    let all = c
        .expect(
            200,
            VIEW,
            "POST",
            "/v1/machine/ipmi/find",
            &[],
            Some(json!({})),
        )
        .await;
    let addresses: Vec<&str> = all
        .body
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| m["ipmi"]["address"].as_str().expect("an address"))
        .collect();
    assert_eq!(addresses.len(), 6, "{}", all.body);
    for address in addresses {
        let address: std::net::SocketAddr = address.parse().expect("host:port");
        assert!(address.ip().is_loopback(), "{address}");
    }
    let find = json!({"id": machine});
    let found = c
        .expect(200, VIEW, "POST", "/v1/machine/ipmi/find", &[], Some(find))
        .await;
    assert_eq!(found.body.as_array().map(Vec::len), Some(1));
    let one = "/v1/machine/{id}/ipmi";
    let answer = c.expect(200, VIEW, "GET", one, &[machine], None).await;
    assert_eq!(answer.body["ipmi"]["powerstate"], json!("ON"));
    c.expect(404, VIEW, "GET", one, &["nope"], None).await;
}

/// On a freed `machine`: a reinstall is refused.
pub(super) async fn freed(c: &mut Caller<'_>, machine: &str) {
    let request = json!({"id": machine, "imageid": "debian-13"});
    let answer = c
        .expect(
            400,
            EDIT,
            "POST",
            "/v1/machine/{id}/reinstall",
            &[machine],
            Some(request),
        )
        .await;
    let inner: Value =
        serde_json::from_str(answer.body.as_str().expect("wrapped")).expect("inner json");
    let message = inner["message"].as_str().unwrap_or_default();
    assert!(message.contains("is not allocated"), "{inner}");
}
