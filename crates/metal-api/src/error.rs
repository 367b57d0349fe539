//! The one error type of the metal-api client.

use super::types::HttpErrorResponse;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// metal-api answered with an error status.
    #[error("metal-api {endpoint} returned {status}: {message}")]
    Api {
        endpoint: &'static str,
        status: u16,
        message: String,
    },
    /// The request did not complete (connection refused or reset, DNS, TLS). `via` names where
    /// the credentials (and so the URL) came from, when not from capms's own settings.
    #[error("metal-api {endpoint}{via} could not be reached: {source}")]
    Transport {
        endpoint: &'static str,
        via: String,
        #[source]
        source: reqwest::Error,
    },
    /// metal-api did not answer within the request timeout.
    #[error("metal-api {endpoint}{via} did not answer within {timeout:?}")]
    Timeout {
        endpoint: &'static str,
        via: String,
        timeout: std::time::Duration,
    },
    /// The answer was not the JSON we expect (at a URL that is not metal-api's, say). `via`
    /// names where the URL came from, when not from capms's own settings.
    #[error("metal-api {endpoint}{via} sent a response capms cannot read: {detail}")]
    Decode {
        endpoint: &'static str,
        via: String,
        detail: String,
    },
    /// The client configuration is unusable.
    #[error("metal-api client configuration: {0}")]
    Config(String),
}

/// What went wrong with a metal-api call, as a closed set: a metric label, a condition reason,
/// and whether trying again later can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "PascalCase", prefix = "Metal")]
pub enum Category {
    NotFound,
    Conflict,
    Unauthorized,
    /// 400/422: metal-api refused the request as given.
    Rejected,
    /// No free machine of the size in the partition (metal-api's 422 "no machine available").
    /// Its reason goes without the prefix: it says what to do.
    NoMachineAvailable,
    ServerError,
    /// 429: over a rate limit (API v2's per token; or not sent, the client's budget of calls
    /// a minute spent). Passes by itself.
    RateLimited,
    Unreachable,
    Timeout,
    BadResponse,
    Config,
}

impl Category {
    /// snake_case, for metrics and logs: `metal_server_error`.
    pub fn label(self) -> &'static str {
        match self {
            Category::NotFound => "metal_not_found",
            Category::Conflict => "metal_conflict",
            Category::Unauthorized => "metal_unauthorized",
            Category::Rejected => "metal_rejected",
            Category::NoMachineAvailable => "metal_no_machine_available",
            Category::ServerError => "metal_server_error",
            Category::RateLimited => "metal_rate_limited",
            Category::Unreachable => "metal_unreachable",
            Category::Timeout => "metal_timeout",
            Category::BadResponse => "metal_bad_response",
            Category::Config => "metal_config",
        }
    }

    /// PascalCase, for condition reasons: `MetalServerError`.
    pub fn reason(self) -> &'static str {
        match self {
            Category::NoMachineAvailable => "NoMachineAvailable",
            other => other.into(),
        }
    }

    /// Can the same call succeed later without anyone changing anything? A machine may be
    /// freed, metal-api may come back; a refusal, a missing object or bad credentials stay.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Category::Conflict
                | Category::NoMachineAvailable
                | Category::ServerError
                | Category::RateLimited
                | Category::Unreachable
                | Category::Timeout
        )
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::Api { status: 404, .. } => Category::NotFound,
            Error::Api { status: 409, .. } => Category::Conflict,
            Error::Api {
                status: 401 | 403, ..
            } => Category::Unauthorized,
            // metal-api signals an empty pool only by this message of a 422.
            Error::Api {
                status: 422,
                message,
                ..
            } if message.contains("no machine available") => Category::NoMachineAvailable,
            Error::Api {
                status: 400 | 422, ..
            } => Category::Rejected,
            Error::Api { status: 429, .. } => Category::RateLimited,
            Error::Api { .. } => Category::ServerError,
            Error::Transport { .. } => Category::Unreachable,
            Error::Timeout { .. } => Category::Timeout,
            Error::Decode { .. } => Category::BadResponse,
            Error::Config(_) => Category::Config,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Worth trying again: metal-api unreachable, slow, or failing on its side.
    pub fn is_transient(&self) -> bool {
        match self {
            // 429: over a rate limit (API v2's per token), which passes.
            Error::Api { status, .. } => *status >= 500 || *status == 429,
            Error::Transport { .. } | Error::Timeout { .. } => true,
            Error::Decode { .. } | Error::Config(_) => false,
        }
    }

    /// The message metal-api gave, if this is an API error.
    pub fn api_message(&self) -> Option<&str> {
        match self {
            Error::Api { message, .. } => Some(message),
            _ => None,
        }
    }
}

/// The words naming where credentials came from, and the transport error to keep: a URL from a
/// Secret is the Secret's, so an error with credentials from one names the Secret, not the URL.
pub(crate) fn as_given_by(origin: Option<&str>, e: reqwest::Error) -> (String, reqwest::Error) {
    match origin {
        Some(_) => (via(origin), e.without_url()),
        None => (String::new(), e),
    }
}

/// Where a call's URL came from, to follow the endpoint in a message: ` (as Secret ns/name
/// gives it)`, or nothing for capms's own settings.
pub(crate) fn via(origin: Option<&str>) -> String {
    origin.map_or_else(String::new, |o| format!(" (as {o} gives it)"))
}

/// Reads an error body in any of the forms metal-api sends: a JSON string wrapping the compact
/// `{statuscode, message}` object (what Go's TextMarshaler produces), the plain object, or a bare
/// JSON string such as `"tenant x not allowed"`. Anything else is used as the message verbatim.
pub fn decode_error_body(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::String(inner)) => {
            match serde_json::from_str::<HttpErrorResponse>(&inner) {
                Ok(e) => e.message,
                Err(_) => inner,
            }
        }
        Ok(value @ serde_json::Value::Object(_)) => {
            match serde_json::from_value::<HttpErrorResponse>(value.clone()) {
                Ok(e) => e.message,
                Err(_) => value.to_string(),
            }
        }
        _ => String::from_utf8_lossy(body).trim().to_owned(),
    }
}

/// Encodes an error body the way metal-api does: the compact object wrapped in a JSON string.
pub fn encode_error_body(status: u16, message: &str) -> String {
    // Field order as Go writes it: statuscode, then message.
    let inner = HttpErrorResponse {
        statuscode: status,
        message: message.to_owned(),
    };
    let inner = serde_json::to_string(&inner).unwrap_or_default();
    serde_json::Value::String(inner).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn categories_say_what_happened_and_whether_to_wait() {
        let api = |status: u16, message: &str| Error::Api {
            endpoint: "machine_allocate",
            status,
            message: message.into(),
        };
        let empty = api(422, "no machine available");
        assert_eq!(empty.category(), Category::NoMachineAvailable);
        assert_eq!(empty.category().reason(), "NoMachineAvailable");
        assert!(empty.category().is_transient(), "a machine may be freed");
        let refused = api(422, "projectid must not be empty");
        assert_eq!(refused.category(), Category::Rejected);
        assert!(!refused.category().is_transient());
        assert_eq!(api(503, "x").category().reason(), "MetalServerError");
        assert_eq!(api(404, "x").category().label(), "metal_not_found");
        let limited = api(429, "not sent, the token's calls per minute are spent");
        assert_eq!(limited.category().reason(), "MetalRateLimited");
        assert_eq!(limited.category().label(), "metal_rate_limited");
        assert!(limited.category().is_transient(), "the minute passes");
    }

    use super::*;

    #[test]
    fn string_wrapped_form() {
        let body = br#""{\"statuscode\":404,\"message\":\"NotFound no machine with id \\\"abc\\\" found\"}""#;
        assert_eq!(
            decode_error_body(body),
            r#"NotFound no machine with id "abc" found"#
        );
    }

    #[test]
    fn plain_object_form() {
        let body = br#"{"statuscode":422,"message":"no machine available"}"#;
        assert_eq!(decode_error_body(body), "no machine available");
    }

    #[test]
    fn bare_string_and_garbage() {
        assert_eq!(
            decode_error_body(br#""tenant  not allowed""#),
            "tenant  not allowed"
        );
        assert_eq!(
            decode_error_body(b"upstream connect error\n"),
            "upstream connect error"
        );
        assert_eq!(decode_error_body(br#"{"other":1}"#), r#"{"other":1}"#);
    }

    #[test]
    fn encoding_round_trips() {
        let body = encode_error_body(409, "Conflict ip already allocated");
        assert!(body.starts_with('"'), "string-wrapped: {body}");
        assert_eq!(
            decode_error_body(body.as_bytes()),
            "Conflict ip already allocated"
        );
    }
}
