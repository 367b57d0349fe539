//! The Connect protocol's unary JSON calls as metal-apiserver answers them: the request message
//! as JSON in a POST body, the answer as JSON with 200, an error as `{"code", "message"}` with
//! the HTTP status Connect maps its code to.

use crate::state::SimError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use metalstack_api::Code;

/// A call's failure, as the client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectError {
    pub code: Code,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> ConnectError {
        ConnectError {
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let body = json!({"code": self.code, "message": self.message});
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_answer(status, &body)
    }
}

/// metal-apiserver's answer for an entity a project does not have (its store's message, with
/// the entity's Go type, `Machine`, `IP`, `Network`).
pub fn not_found(entity: &str, id: &str) -> ConnectError {
    ConnectError::new(
        Code::NotFound,
        format!("*metal.{entity} with id {id:?} not found"),
    )
}

/// metal-api's refusal as a Connect error.
pub fn refused(e: SimError) -> ConnectError {
    let code = match e.status {
        404 => Code::NotFound,
        409 => Code::AlreadyExists,
        400 | 422 => Code::FailedPrecondition,
        _ => Code::Internal,
    };
    ConnectError::new(code, e.message)
}

/// A message as the answer of a successful call.
pub fn answer(message: &Value) -> Response {
    json_answer(StatusCode::OK, message)
}

fn json_answer(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The request message of a call's body: a JSON object (an empty body is the empty message).
pub fn request_message(body: &[u8]) -> Result<Value, ConnectError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(message @ Value::Object(_)) => Ok(message),
        Ok(_) => Err(ConnectError::new(
            Code::InvalidArgument,
            "the request message is not a JSON object",
        )),
        Err(e) => Err(ConnectError::new(
            Code::InvalidArgument,
            format!("unmarshal the request message: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_body_is_the_empty_message_and_a_non_object_is_refused() {
        assert_eq!(request_message(b""), Ok(json!({})));
        let refused = request_message(b"[1]").expect_err("refused");
        assert_eq!(refused.code, Code::InvalidArgument);
    }
}
