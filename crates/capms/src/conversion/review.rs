//! The conversion webhook: `POST /convert` on the webhook server, answering the apiserver's
//! ConversionReviews (`apiextensions.k8s.io/v1`).

use super::convert;
use axum::Router;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

pub use crate::api::common::CONVERSION_PATH as PATH;

pub fn router() -> Router {
    Router::new().route(PATH, post(|body: Bytes| async move { reply(&body) }))
}

/// The answer to one ConversionReview. Always a review the apiserver can read: a conversion
/// that cannot be done is a failed review naming the object and field, never an HTTP error.
pub fn answer(body: &[u8]) -> ConversionReview {
    let review: ConversionReview = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => return failed(format!("malformed ConversionReview: {e}")),
    };
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => return failed("ConversionReview without a request".into()),
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<Value>, String> = request
        .objects
        .iter()
        .map(|object| convert(object, &desired).map_err(|e| e.to_string()))
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(message) => response.failure(status(message)),
    }
    .into_review()
}

fn reply(body: &[u8]) -> Response {
    axum::Json(answer(body)).into_response()
}

fn failed(message: String) -> ConversionReview {
    ConversionResponse::invalid(status(message)).into_review()
}

fn status(message: String) -> Status {
    Status::failure(&message, "Invalid").with_code(422)
}
