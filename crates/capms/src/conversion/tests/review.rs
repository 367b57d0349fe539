//! The conversion webhook: ConversionReviews over HTTP.

use super::api_version;
use crate::conversion::review::{PATH, router};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The answer of `POST /convert` to `body`.
async fn posted(body: Vec<u8>) -> Value {
    let request = axum::http::Request::post(PATH)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    let response = router().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), axum::http::StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await;
    serde_json::from_slice(&bytes.expect("body")).unwrap_or_default()
}

async fn review(objects: Value, desired: &str) -> Value {
    let body = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": api_version(desired), "objects": objects},
    });
    posted(body.to_string().into_bytes()).await
}

#[tokio::test]
async fn a_review_converts_every_object_or_fails_naming_the_one_that_cannot() {
    let machine = |size: Option<&str>| {
        let mut m = json!({"apiVersion": api_version("v1alpha1"), "kind": "MetalStackMachine",
                           "metadata": {"name": "m", "namespace": "n"}, "spec": {"image": "ubuntu"}});
        if let Some(size) = size {
            m["spec"]["size"] = json!(size);
        }
        m
    };
    let ok = review(
        json!([machine(Some("c1")), machine(Some("c2"))]),
        "v1alpha4",
    )
    .await;
    assert_eq!(ok["response"]["uid"], "u-1", "{ok:#}");
    assert_eq!(ok["response"]["result"]["status"], "Success", "{ok:#}");
    assert_eq!(
        ok["response"]["convertedObjects"][1]["spec"]["machineType"], "c2",
        "{ok:#}"
    );

    let failed = review(json!([machine(Some("c1")), machine(None)]), "v1alpha4").await;
    assert_eq!(failed["response"]["uid"], "u-1", "{failed:#}");
    assert_eq!(
        failed["response"]["result"]["status"], "Failure",
        "{failed:#}"
    );
    let message = failed["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("MetalStackMachine n/m") && message.contains("spec.machineType"),
        "{message}"
    );

    let garbage = posted(b"{not json".to_vec()).await;
    assert_eq!(
        garbage["response"]["result"]["status"], "Failure",
        "{garbage:#}"
    );
}
