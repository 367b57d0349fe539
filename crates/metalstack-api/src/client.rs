//! Unary Connect calls with JSON bodies, under the client's current project token.

use crate::error::{Code, Error};
use crate::token::Token;
use crate::types::{
    MachineServiceGetRequest, MachineServiceGetResponse, MachineServiceListRequest,
    MachineServiceListResponse, TokenServiceRefreshRequest, TokenServiceRefreshResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::RwLock;

/// The protocol version header every Connect call carries.
const PROTOCOL_VERSION: (&str, &str) = ("connect-protocol-version", "1");

/// A client of one metal-apiserver, calling with one project token at a time.
pub struct Client {
    base: String,
    http: reqwest::Client,
    token: RwLock<Token>,
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
        }
    }

    /// The token calls are made with now.
    pub fn token(&self) -> Token {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Calls with `token` from now on (one refreshed elsewhere, say).
    pub fn use_token(&self, token: Token) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// Calls `procedure` (`/metalstack.api.v2.MachineService/Get`) with `request`.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        procedure: &str,
        request: &Req,
    ) -> Result<Resp, Error> {
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
            return Err(Error::Connect {
                procedure: procedure.to_owned(),
                code: failure.code,
                message: failure.message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| Error::Decode {
            procedure: procedure.to_owned(),
            message: e.to_string(),
        })
    }

    /// `TokenService/Refresh`: a new token for the current one, used from now on.
    pub async fn refresh(&self) -> Result<Token, Error> {
        const PROCEDURE: &str = "/metalstack.api.v2.TokenService/Refresh";
        let answer: TokenServiceRefreshResponse =
            self.call(PROCEDURE, &TokenServiceRefreshRequest {}).await?;
        let token = Token::parse(&answer.secret).map_err(|e| Error::Decode {
            procedure: PROCEDURE.to_owned(),
            message: e.to_string(),
        })?;
        self.use_token(token.clone());
        Ok(token)
    }

    /// `MachineService/Get`.
    pub async fn machine(
        &self,
        project: &str,
        uuid: &str,
    ) -> Result<MachineServiceGetResponse, Error> {
        let request = MachineServiceGetRequest {
            uuid: uuid.to_owned(),
            project: project.to_owned(),
        };
        self.call("/metalstack.api.v2.MachineService/Get", &request)
            .await
    }

    /// `MachineService/List`.
    pub async fn machines(
        &self,
        request: &MachineServiceListRequest,
    ) -> Result<MachineServiceListResponse, Error> {
        self.call("/metalstack.api.v2.MachineService/List", request)
            .await
    }
}
