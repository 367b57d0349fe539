//! Unary Connect calls with JSON bodies, under the client's current project token.

use crate::budget::Budget;
use crate::error::{Code, Error};
use crate::token::Token;
use crate::types::{Rpc, TokenServiceRefreshRequest};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

/// The protocol version header every Connect call carries.
const PROTOCOL_VERSION: (&str, &str) = ("connect-protocol-version", "1");

/// The calls per minute a client sends with one token unless told otherwise: metal-apiserver's
/// default limit (100) less a tenth for others using the same token (metal-token-refresher).
pub const DEFAULT_CALLS_PER_MINUTE: u32 = 90;

/// A client of one metal-apiserver, calling with one project token at a time, within a budget
/// of calls per minute.
pub struct Client {
    base: String,
    http: reqwest::Client,
    token: RwLock<Token>,
    budget: Mutex<Budget>,
}

/// An error answer's body.
#[derive(serde::Deserialize)]
struct Failure {
    code: Code,
    #[serde(default)]
    message: String,
}

impl Client {
    /// A client of the metal-apiserver at `base` (its URL, without a path for the procedures)
    /// calling with `token`.
    pub fn new(base: &str, http: reqwest::Client, token: Token) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            http,
            token: RwLock::new(token),
            budget: Mutex::new(Budget::new(DEFAULT_CALLS_PER_MINUTE)),
        }
    }

    /// The same client sending at most `calls` a minute.
    pub fn with_calls_per_minute(self, calls: u32) -> Client {
        Client {
            budget: Mutex::new(Budget::new(calls)),
            ..self
        }
    }

    fn budget(&self) -> std::sync::MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The share of the token's calls per minute it may still make now (0 to 1): callers that
    /// may ask less often (a listing that could be a little older) do so when it runs low.
    pub fn budget_left(&self) -> f64 {
        self.budget().left(Instant::now())
    }

    /// The token calls are made with now.
    pub fn token(&self) -> Token {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Calls with `token` from now on (one refreshed elsewhere, say).
    pub fn use_token(&self, token: Token) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// Sends `request` to its procedure, within the token's budget.
    pub(crate) async fn call<R: Rpc>(&self, request: &R) -> Result<R::Response, Error> {
        self.send(request, true).await
    }

    /// Sends `request` to its procedure; `budgeted`, only within the token's budget and not
    /// while paused after a refusal.
    async fn send<R: Rpc>(&self, request: &R, budgeted: bool) -> Result<R::Response, Error> {
        let procedure = R::PROCEDURE;
        let taken = match budgeted {
            true => self.budget().take(Instant::now()),
            false => Ok(()),
        };
        if let Err(wait) = taken {
            return Err(Error::Budget {
                procedure: procedure.to_owned(),
                wait,
            });
        }
        let bearer = self.token().bearer().to_owned();
        let transport = |source| Error::Transport {
            procedure: procedure.to_owned(),
            source,
        };
        let answer = self
            .http
            .post(format!("{}{procedure}", self.base))
            .header(PROTOCOL_VERSION.0, PROTOCOL_VERSION.1)
            .bearer_auth(bearer)
            .json(request)
            .send()
            .await
            .map_err(transport)?;
        let status = answer.status();
        let body = answer.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let failure = serde_json::from_slice::<Failure>(&body).unwrap_or(Failure {
                code: Code::of_status(status.as_u16()),
                message: String::from_utf8_lossy(&body).into_owned(),
            });
            if failure.code == Code::ResourceExhausted {
                self.budget().refused(Instant::now());
            }
            return Err(Error::Connect {
                procedure: procedure.to_owned(),
                code: failure.code,
                message: failure.message,
            });
        }
        self.budget().answered();
        serde_json::from_slice(&body).map_err(|e| Error::Decode {
            procedure: procedure.to_owned(),
            message: e.to_string(),
        })
    }

    /// `TokenService/Refresh`: a new token for the current one, used from now on. Sent outside
    /// the budget, even while other calls pause: it is one call in half a token's lifetime, the
    /// budget's margin under metal-apiserver's limit has room for it, and a token that expires
    /// while its calls pause cannot be refreshed at all.
    pub async fn refresh(&self) -> Result<Token, Error> {
        let answer = self.send(&TokenServiceRefreshRequest {}, false).await?;
        let token = Token::parse(&answer.secret).map_err(|e| Error::Decode {
            procedure: TokenServiceRefreshRequest::PROCEDURE.to_owned(),
            message: e.to_string(),
        })?;
        self.use_token(token.clone());
        Ok(token)
    }

    /// Refreshes the token once half its lifetime or less is left at `now`: the new
    /// one, to be kept where the old one came from, or `None` when it was not yet due.
    pub async fn refresh_if_due(&self, now: jiff::Timestamp) -> Result<Option<Token>, Error> {
        if self.token().refresh_due(now) {
            self.refresh().await.map(Some)
        } else {
            Ok(None)
        }
    }
}
