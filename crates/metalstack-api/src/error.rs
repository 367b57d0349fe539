//! A call's failure: the Connect code metal-apiserver answered with, or why no answer came.

use serde::{Deserialize, Serialize};

/// The Connect protocol's error codes, as the `code` field of an error answer spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// Does asking again later make sense? The server was busy, cut short or over the token's
    /// rate limit; anything else needs a change first.
    pub fn transient(self) -> bool {
        matches!(
            self,
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Internal
                | Code::Unknown
        )
    }

    /// The HTTP status a Connect server answers the code with.
    pub fn http_status(self) -> u16 {
        match self {
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::ResourceExhausted => 429,
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::DeadlineExceeded => 504,
        }
    }

    /// The code a Connect server means by an HTTP status, for an error answer without a body
    /// (a proxy's, say), as the protocol maps them.
    pub fn of_status(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502..=504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

/// A v2 call that failed, naming the procedure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{procedure}: {code:?}: {message}")]
    Connect {
        procedure: String,
        code: Code,
        message: String,
    },
    #[error("{procedure}: no answer: {source}")]
    Transport {
        procedure: String,
        source: reqwest::Error,
    },
    #[error("{procedure}: the answer does not fit its message: {message}")]
    Decode { procedure: String, message: String },
    /// Not sent: the token's budget of calls per minute is spent, or the server refused one
    /// for the token's rate a moment ago. The message leaves out the wait (`retry_after`): it
    /// ends in conditions, and one changing with every refusal would make each a new status
    /// write, waking the objects that watch it to be refused again.
    #[error(
        "{procedure}: not sent, the token's calls per minute are spent (metal-apiserver's rate limit)"
    )]
    Budget {
        procedure: String,
        wait: std::time::Duration,
    },
}

impl Error {
    /// The Connect code: the server's, or `unavailable` when none answered.
    pub fn code(&self) -> Code {
        match self {
            Error::Connect { code, .. } => *code,
            Error::Transport { .. } => Code::Unavailable,
            Error::Decode { .. } => Code::Internal,
            Error::Budget { .. } => Code::ResourceExhausted,
        }
    }

    /// How long to wait before asking again, when the client knows.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Budget { wait, .. } => Some(*wait),
            _ => None,
        }
    }

    /// Does asking again later make sense?
    pub fn transient(&self) -> bool {
        self.code().transient()
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Code::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_read_as_connect_spells_them_and_only_a_busy_server_is_asked_again() {
        let code = |name: &str| {
            serde_json::from_value::<Code>(serde_json::Value::String(name.into()))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        assert_eq!(code("resource_exhausted"), Code::ResourceExhausted);
        assert_eq!(code("permission_denied"), Code::PermissionDenied);
        for transient in ["unavailable", "resource_exhausted", "deadline_exceeded"] {
            assert!(code(transient).transient(), "{transient}");
        }
        for terminal in [
            "unauthenticated",
            "permission_denied",
            "invalid_argument",
            "not_found",
        ] {
            assert!(!code(terminal).transient(), "{terminal}");
        }
        assert_eq!(Code::of_status(429), Code::Unavailable);
        assert_eq!(
            serde_json::to_value(Code::FailedPrecondition).ok(),
            Some(serde_json::json!("failed_precondition"))
        );
    }

    #[test]
    fn codes_are_answered_with_the_http_statuses_connect_gives_them() {
        let cases = [
            (Code::Canceled, 499),
            (Code::Unknown, 500),
            (Code::InvalidArgument, 400),
            (Code::DeadlineExceeded, 504),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::PermissionDenied, 403),
            (Code::ResourceExhausted, 429),
            (Code::FailedPrecondition, 400),
            (Code::Aborted, 409),
            (Code::OutOfRange, 400),
            (Code::Unimplemented, 501),
            (Code::Internal, 500),
            (Code::Unavailable, 503),
            (Code::DataLoss, 500),
            (Code::Unauthenticated, 401),
        ];
        for (code, status) in cases {
            assert_eq!(code.http_status(), status, "{code:?}");
        }
        assert_eq!(Code::of_status(401), Code::Unauthenticated);
    }
}
