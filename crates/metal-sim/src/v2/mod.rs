//! metal-apiserver's API v2 beside metal-api, on the same state: Connect unary calls with JSON
//! (`POST /metalstack.api.v2.<Service>/<Method>`), bearer tokens the simulator issues (bound to
//! projects with roles, expiring, revocable), each method's access as its proto declares it,
//! metal-apiserver's per-token rate limit and the protos' rules on what a provider sends. The
//! methods served so far are in [`SERVED`];
//! `/sim/v2/tokens` mints and revokes tokens for tests.

mod allocate;
pub mod authorize;
mod catalog;
pub mod connect;
mod ips;
mod labels;
mod machines;
mod networks;
pub mod rate;
pub mod tokens;
mod validate;

use crate::Sim;
use authorize::{Access, EDITOR, VIEWER, authorize};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use connect::{Code, ConnectError, answer, request_message};
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use tokens::{MethodPermission, ProjectRole, Token};

/// What serves a method: the simulator, the caller's token (None: no token) and the request.
type Serve = fn(&Sim, Option<&Token>, &Value) -> Result<Value, ConnectError>;

/// What a method waits for before it answers (the request given), past its change of state.
type Settle = fn(Sim, Value) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// A method the simulator serves.
pub struct Served {
    /// `/<package>.<Service>/<Method>`.
    pub procedure: &'static str,
    pub access: Access,
    serve: Serve,
    settle: Option<Settle>,
}

/// Every v2 method the simulator serves.
pub const SERVED: &[Served] = &[
    Served {
        procedure: "/metalstack.api.v2.MachineService/Get",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| machines::get(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.MachineService/List",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| machines::list(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.MachineService/Create",
        access: Access::Project(EDITOR),
        serve: allocate::create,
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.MachineService/Delete",
        access: Access::Project(EDITOR),
        serve: allocate::delete,
        settle: Some(allocate::freed_up),
    },
    Served {
        procedure: "/metalstack.api.v2.MachineService/BMCCommand",
        access: Access::Project(EDITOR),
        serve: allocate::bmc_command,
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.IPService/Create",
        access: Access::Project(EDITOR),
        serve: |sim, _, request| ips::create(&mut sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.IPService/Get",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| ips::get(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.IPService/Delete",
        access: Access::Project(EDITOR),
        serve: |sim, _, request| ips::delete(&mut sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.IPService/List",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| ips::list(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.NetworkService/Create",
        access: Access::Project(EDITOR),
        serve: |sim, _, request| networks::create(&mut sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.NetworkService/Get",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| networks::get(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.NetworkService/Delete",
        access: Access::Project(EDITOR),
        serve: |sim, _, request| networks::delete(&mut sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.NetworkService/List",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| networks::list(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.NetworkService/ListBaseNetworks",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| networks::list_base(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.ProjectService/Get",
        access: Access::Project(VIEWER),
        serve: |sim, _, request| catalog::project(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.HealthService/Get",
        access: Access::Public,
        serve: |sim, _, request| catalog::health(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.PartitionService/List",
        access: Access::SelfOnly,
        serve: |sim, _, request| catalog::partitions(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.SizeService/List",
        access: Access::SelfOnly,
        serve: |sim, _, request| catalog::sizes(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.ImageService/List",
        access: Access::SelfOnly,
        serve: |sim, _, request| catalog::images(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.ImageService/Latest",
        access: Access::SelfOnly,
        serve: |sim, _, request| catalog::latest(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.SizeImageConstraintService/Try",
        access: Access::SelfOnly,
        serve: |sim, _, request| catalog::try_size_image(&sim.state(), request),
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.TokenService/Refresh",
        access: Access::SelfOnly,
        serve: refresh,
        settle: None,
    },
    Served {
        procedure: "/metalstack.api.v2.TokenService/Revoke",
        access: Access::SelfOnly,
        serve: revoke,
        settle: None,
    },
];

/// The caller's token; `SelfOnly` methods are only reached with one.
fn caller(token: Option<&Token>) -> Result<&Token, ConnectError> {
    token.ok_or_else(|| ConnectError::new(Code::Unauthenticated, "no token"))
}

/// `TokenService/Refresh`: a new token with the caller's roles, permissions and lifetime; the
/// caller's stays valid until it expires.
fn refresh(sim: &Sim, token: Option<&Token>, _: &Value) -> Result<Value, ConnectError> {
    let old = caller(token)?;
    let now = Timestamp::now();
    let lifetime = old.expires.duration_since(old.issued_at);
    let new = Token {
        uuid: uuid::Uuid::new_v4().to_string(),
        issued_at: now,
        expires: now.saturating_add(lifetime).unwrap_or(now),
        ..old.clone()
    };
    let secret = sim.tokens().issue(new.clone());
    Ok(json!({"token": new.message(), "secret": secret}))
}

/// `TokenService/Revoke {uuid}`: one of the caller's own tokens.
fn revoke(sim: &Sim, token: Option<&Token>, request: &Value) -> Result<Value, ConnectError> {
    let user = &caller(token)?.user;
    let uuid = request["uuid"].as_str().unwrap_or_default();
    if sim.tokens().revoke(uuid, Some(user)) {
        Ok(json!({}))
    } else {
        Err(ConnectError::new(Code::NotFound, "token not found"))
    }
}

/// One call, as metal-apiserver's interceptors take it: authentication, authorization, the
/// rate limit, the protos' validation rules, then the method.
async fn call(sim: Sim, served: &'static Served, headers: HeaderMap, body: Bytes) -> Response {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response();
    }
    match serve(&sim, served, &headers, &body) {
        Ok(message) => {
            if let (Some(settle), Ok(request)) = (served.settle, request_message(&body)) {
                settle(sim, request).await;
            }
            answer(&message)
        }
        Err(e) => e.into_response(),
    }
}

fn serve(
    sim: &Sim,
    served: &Served,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ConnectError> {
    let now = Timestamp::now();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = sim.tokens().authenticate(authorization, now)?;
    let request = request_message(body)?;
    authorize(token.as_ref(), served.procedure, served.access, &request)?;
    if let Some(token) = &token {
        let minute = now.as_second().div_euclid(60);
        sim.rates()
            .count(&token.uuid, minute, sim.config.rate_limit)?;
    }
    validate::validate(served.procedure, &request)?;
    (served.serve)(sim, token.as_ref(), &request)
}

/// The v2 routes, at the root beside metal-api's base path.
pub fn router() -> Router<Sim> {
    let mut router = Router::new();
    for served in SERVED {
        router = router.route(
            served.procedure,
            post(
                move |State(sim): State<Sim>, headers: HeaderMap, body: Bytes| {
                    call(sim, served, headers, body)
                },
            ),
        );
    }
    router
        .route("/sim/v2/tokens", post(mint))
        .route("/sim/v2/tokens/{uuid}", delete(revoke_any))
}

/// What `POST /sim/v2/tokens` takes: metal-apiserver's `TokenServiceCreateRequest` (its
/// description, roles by project, permissions by visibility and lifetime), and the user the
/// token is of.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MintRequest {
    #[serde(default = "default_user")]
    user: String,
    /// Taken and not kept: the simulator lists no tokens.
    #[serde(default, rename = "description")]
    _description: String,
    #[serde(default)]
    project_roles: BTreeMap<String, ProjectRole>,
    #[serde(default)]
    permissions: Vec<PermissionsByVisibility>,
    /// A protojson duration (`"3600s"`); 8 h, metal-apiserver's default, when absent.
    expires: Option<String>,
}

/// `PermissionsByVisibility`: methods of visibility SELF (no subject) or of a project.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum PermissionsByVisibility {
    #[serde(rename = "self")]
    OfSelf { methods: Vec<String> },
    #[serde(rename = "project")]
    OfProject {
        project: String,
        methods: Vec<String>,
    },
}

impl From<PermissionsByVisibility> for MethodPermission {
    fn from(permissions: PermissionsByVisibility) -> MethodPermission {
        match permissions {
            PermissionsByVisibility::OfSelf { methods } => MethodPermission {
                subject: String::new(),
                methods,
            },
            PermissionsByVisibility::OfProject { project, methods } => MethodPermission {
                subject: project,
                methods,
            },
        }
    }
}

fn default_user() -> String {
    "sim-tester".into()
}

/// A protojson duration: seconds with an `s`, fractions allowed.
fn duration(text: &str) -> Option<SignedDuration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    SignedDuration::try_from_secs_f64(seconds).ok()
}

/// `POST /sim/v2/tokens`: a token with the roles and permissions asked for (any lifetime, unlike
/// `TokenService/Create`, so that tests can let one expire); the answer is
/// `TokenServiceCreateResponse`'s `{token, secret}`.
async fn mint(State(sim): State<Sim>, body: Bytes) -> Response {
    let bad = |message: String| ConnectError::new(Code::InvalidArgument, message).into_response();
    let request: MintRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad(format!("a token request: {e}")),
    };
    let lifetime = match request.expires.as_deref().map(duration) {
        None => SignedDuration::from_hours(8),
        Some(Some(d)) if d.is_positive() => d,
        Some(_) => return bad("expires: a positive duration such as \"3600s\"".into()),
    };
    let mut tokens = sim.tokens();
    let (token, secret) = tokens.mint(
        &request.user,
        request.project_roles,
        request.permissions.into_iter().map(Into::into).collect(),
        lifetime,
        Timestamp::now(),
    );
    answer(&json!({"token": token.message(), "secret": secret}))
}

/// `DELETE /sim/v2/tokens/{uuid}`: revokes any token, as an admin would.
async fn revoke_any(State(sim): State<Sim>, Path(uuid): Path<String>) -> Response {
    if sim.tokens().revoke(&uuid, None) {
        answer(&json!({}))
    } else {
        ConnectError::new(Code::NotFound, "token not found").into_response()
    }
}

#[cfg(test)]
mod tests;
