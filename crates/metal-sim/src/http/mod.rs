//! HTTP face of the simulator: metal-api's routes, filters (HMAC, tenant, role) and error
//! encoding, plus `/sim/faults` (fault injection) and `/sim/stats` (request counts), which are
//! not part of metal-api.

mod control;
mod handlers;
mod listener;
mod power;

pub use listener::FaultyListener;

use super::Sim;
use super::state::{SimError, SimResult};
use super::stats::UNMATCHED;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, Request, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get, on};
use axum::{Extension, Router};
use metal_api::error::encode_error_body;
use metal_api::hmac::{self, AuthType};
use metal_api::size_images::SizeImageConstraintTryRequest;
use metal_api::types::*;
use rand::Rng;
use serde::{Serialize, de::DeserializeOwned};
use std::time::Duration;

/// Who is calling, after the HMAC check.
#[derive(Clone, Debug)]
struct Identity {
    auth_type: Option<AuthType>,
    tenant: String,
}

/// The groups metal-api gives an HMAC identity of this auth type.
fn groups_of(auth_type: AuthType) -> [String; 2] {
    let level = match auth_type {
        AuthType::View => "view",
        AuthType::Edit => "edit",
        AuthType::Admin => "admin",
    };
    [format!("k8s_kaas-{level}"), format!("maas-all-all-{level}")]
}

impl Identity {
    fn groups(&self) -> Vec<String> {
        self.auth_type
            .map(groups_of)
            .map(Vec::from)
            .unwrap_or_default()
    }

    fn email(&self) -> String {
        match self.auth_type {
            Some(t) => format!("{}@metal-stack.io", t.scheme().to_lowercase()),
            None => "anonymous".into(),
        }
    }
}

#[derive(Clone, Copy)]
enum Role {
    Viewer,
    Editor,
    Admin,
}

impl Role {
    fn accepts(self, auth: Option<AuthType>) -> bool {
        matches!(
            (self, auth),
            (Role::Viewer, Some(_))
                | (Role::Editor, Some(AuthType::Edit | AuthType::Admin))
                | (Role::Admin, Some(AuthType::Admin))
        )
    }

    /// The groups of every identity the role accepts, as metal-api lists them in a refusal.
    fn groups(self) -> String {
        AuthType::ALL
            .into_iter()
            .filter(|t| self.accepts(Some(*t)))
            .flat_map(groups_of)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn require(identity: &Identity, role: Role) -> SimResult<()> {
    if role.accepts(identity.auth_type) {
        Ok(())
    } else {
        Err(SimError::new(
            403,
            format!("you are not member in one of [{}]", role.groups()),
        ))
    }
}

impl IntoResponse for SimError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, encode_error_body(self.status, &self.message))
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn ok<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(body) => json_response(status, body),
        Err(e) => SimError::new(500, format!("encoding the response: {e}")).into_response(),
    }
}

/// Reads a request body as metal-api (Go's encoding/json) does: `null` and missing fields are
/// "not set", unknown fields are ignored; a wrong type or malformed JSON is a 400 naming the
/// field.
fn parse<T: DeserializeOwned>(body: &Bytes) -> SimResult<T> {
    metal_api::json::decode(body)
        .map_err(|e| SimError::bad_request(format!("cannot read request: {e}")))
}

/// Fault injection, HMAC check, tenant filter: in metal-api's order.
async fn filters(State(sim): State<Sim>, mut request: Request, next: Next) -> Response {
    let faults = sim.state().faults.clone();
    if faults.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    }
    let (spike, error) = (happens(faults.spike_rate), happens(faults.error_rate));
    {
        let counts = &mut sim.stats().faults;
        counts.requests += 1;
        counts.spikes += u64::from(spike);
        counts.errors += u64::from(error);
    }
    if spike {
        let spike = faults.spike_ms.unwrap_or(2_000);
        tokio::time::sleep(Duration::from_millis(spike)).await;
    }
    if error {
        let codes = &faults.error_codes;
        let code = match codes.is_empty() {
            true => 503,
            false => codes[rand::rng().random_range(0..codes.len())],
        };
        let what = StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error");
        return SimError::new(code, format!("injected fault: {what}")).into_response();
    }
    let tenant = sim.state().tenant.clone();
    let identity = match authenticate(request.headers(), request.method(), &sim, &tenant) {
        Ok(identity) => identity,
        Err(e) => return e.into_response(),
    };
    let path = request.uri().path().to_owned();
    let exempt = ["liveliness", "health", "version"]
        .iter()
        .any(|s| path.trim_end_matches('/').ends_with(s));
    if !exempt && !identity.tenant.eq_ignore_ascii_case(&tenant) {
        // The tenant filter answers with a bare JSON string, not an HTTPErrorResponse.
        return json_response(
            StatusCode::FORBIDDEN,
            serde_json::json!(format!("tenant {} not allowed", identity.tenant)).to_string(),
        );
    }
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|l| l != "0");
    if matches!(*request.method(), Method::POST | Method::PUT) && has_body {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if !json {
            return SimError::new(415, "415: Unsupported Media Type").into_response();
        }
    }
    request.extensions_mut().insert(identity);
    let (lost, held) = (
        happens(faults.lost_answer_rate),
        happens(faults.timeout_rate),
    );
    {
        let counts = &mut sim.stats().faults;
        counts.carried_out += 1;
        counts.lost_answers += u64::from(lost);
        counts.timeouts += u64::from(held);
    }
    let response = next.run(request).await;
    if held {
        let hold = faults.timeout_ms.unwrap_or(12_000);
        tokio::time::sleep(Duration::from_millis(hold)).await;
    }
    if lost {
        let message = "injected fault: bad gateway (the request was carried out, its answer lost)";
        return SimError::new(502, message).into_response();
    }
    response
}

/// Does a fault of `rate` (a fraction) strike this request?
fn happens(rate: f64) -> bool {
    rate > 0.0 && rand::rng().random_bool(rate.clamp(0.0, 1.0))
}

fn authenticate(
    headers: &HeaderMap,
    method: &Method,
    sim: &Sim,
    tenant: &str,
) -> SimResult<Identity> {
    let guest = Identity {
        auth_type: None,
        tenant: String::new(),
    };
    let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(guest);
    };
    let parts: Vec<&str> = auth.split(' ').collect();
    let [scheme, signature] = parts[..] else {
        return Ok(guest);
    };
    let Some(auth_type) = AuthType::from_scheme(scheme) else {
        return Ok(guest);
    };
    let Some(key) = sim.hmac_key(auth_type) else {
        return Ok(guest);
    };
    let date = headers
        .get("X-Date")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let parsed: jiff::Timestamp = date.parse().map_err(|_| {
        SimError::new(403, format!("unknown timestamp {date:?} in \"X-Date\" header, use RFC3339: 2006-01-02T15:04:05Z07:00"))
    })?;
    let lifetime = if auth_type == AuthType::Admin { 90 } else { 30 };
    if jiff::Timestamp::now().duration_since(parsed).as_secs() > lifetime {
        return Err(SimError::new(
            403,
            format!(
                "the timestamp in your header is too old: \"{date}\", please check if you have time synchronization activated"
            ),
        ));
    }
    let canonical = hmac::x_date(parsed);
    let salt = headers
        .get("X-Data-Salt")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !hmac::verify(key.as_bytes(), &canonical, method.as_str(), salt, signature) {
        return Err(SimError::new(403, "Wrong HMAC found"));
    }
    Ok(Identity {
        auth_type: Some(auth_type),
        tenant: tenant.to_owned(),
    })
}

/// The verbs metal-api's routes use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Delete,
}

impl Verb {
    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Delete => Method::DELETE,
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// One metal-api route: verb, path template as metal-api's spec writes it, handler.
struct Route {
    verb: Verb,
    path: &'static str,
    handler: MethodRouter<Sim>,
}

fn route<H, T>(verb: Verb, path: &'static str, handler: H) -> Route
where
    H: Handler<T, Sim>,
    T: 'static,
{
    Route {
        verb,
        path,
        handler: on(verb.filter(), handler),
    }
}

/// Every metal-api route the simulator serves. Anything else answers as metal-api answers an
/// unknown route (404) or a known path with another method (405).
fn metal_api_routes() -> Vec<Route> {
    use Verb::*;
    use handlers::*;
    vec![
        route(Get, "/v1/health", health),
        route(Get, "/v1/version", version),
        route(Get, "/v1/user/me", user_me),
        route(Get, "/v1/partition", partitions),
        route(Post, "/v1/partition/capacity", partition_capacity),
        route(Get, "/v1/partition/{id}", partition),
        route(Get, "/v1/size", sizes),
        route(Get, "/v1/size/{id}", size),
        route(Get, "/v1/image", images),
        route(Post, "/v1/image/find", image_find),
        route(Get, "/v1/image/{id}", image),
        route(Get, "/v1/image/{id}/latest", image_latest),
        route(Get, "/v1/image/{id}/query", image_query),
        route(Get, "/v1/size-image-constraint", size_image_constraints),
        route(Post, "/v1/size-image-constraint/try", size_image_try),
        route(Get, "/v1/size-image-constraint/{id}", size_image_constraint),
        route(Get, "/v1/project", projects),
        route(Post, "/v1/project/find", project_find),
        route(Get, "/v1/project/{id}", project),
        route(Get, "/v1/network", networks),
        route(Post, "/v1/network/find", network_find),
        route(Post, "/v1/network/allocate", network_allocate),
        route(Delete, "/v1/network/free/{id}", network_free),
        route(Post, "/v1/network/free/{id}", network_free),
        route(Get, "/v1/network/{id}", network),
        route(Get, "/v1/ip", ips),
        route(Post, "/v1/ip/find", ip_find),
        route(Post, "/v1/ip/allocate", ip_allocate),
        route(Post, "/v1/ip/allocate/{ip}", ip_allocate_specific),
        route(Delete, "/v1/ip/free/{id}", ip_free),
        route(Get, "/v1/ip/{id}", ip),
        route(Get, "/v1/machine", machines),
        route(Post, "/v1/machine/find", machine_find),
        route(Post, "/v1/machine/allocate", machine_allocate),
        route(Get, "/v1/machine/issues", machine_issues),
        route(Post, "/v1/machine/issues/evaluate", machine_issues_evaluate),
        route(Post, "/v1/machine/ipmi/find", power::machine_ipmi_find),
        route(Delete, "/v1/machine/{id}/free", machine_free),
        route(Post, "/v1/machine/{id}/reinstall", power::machine_reinstall),
        route(Post, "/v1/machine/{id}/power/on", power::power_on),
        route(Post, "/v1/machine/{id}/power/off", power::power_off),
        route(Post, "/v1/machine/{id}/power/reset", power::power_reset),
        route(Post, "/v1/machine/{id}/power/cycle", power::power_cycle),
        route(Post, "/v1/machine/{id}/power/bios", power::power_bios),
        route(Post, "/v1/machine/{id}/power/disk", power::power_disk),
        route(Post, "/v1/machine/{id}/power/pxe", power::power_pxe),
        route(
            Post,
            "/v1/machine/{id}/power/chassis-identify-led-on",
            power::power_led_on,
        ),
        route(
            Post,
            "/v1/machine/{id}/power/chassis-identify-led-off",
            power::power_led_off,
        ),
        route(Get, "/v1/machine/{id}/ipmi", power::machine_ipmi),
        route(Get, "/v1/machine/{id}", machine),
        route(Get, "/v1/firewall", firewalls),
        route(Post, "/v1/firewall/find", firewall_find),
        route(Post, "/v1/firewall/allocate", firewall_allocate),
        route(Get, "/v1/firewall/{id}", firewall),
    ]
}

/// go-restful registers each web service's collection at `/v1/<service>/`; both that and the
/// path without the slash are served.
fn is_collection(path: &str) -> bool {
    path.matches('/').count() == 2
}

/// Every (method, path) the simulator mounts under its base path, trailing-slash variants of
/// collections included: what the contract test checks against metal-api's spec.
pub fn mounted_routes() -> Vec<(Method, String)> {
    let mut mounted = Vec::new();
    for r in metal_api_routes() {
        mounted.push((r.verb.method(), r.path.to_owned()));
        if is_collection(r.path) {
            mounted.push((r.verb.method(), format!("{}/", r.path)));
        }
    }
    mounted
}

fn api_router() -> Router<Sim> {
    let mut router = Router::new();
    for r in metal_api_routes() {
        if is_collection(r.path) {
            router = router.route(&format!("{}/", r.path), r.handler.clone());
        }
        router = router.route(r.path, r.handler);
    }
    router
}

async fn not_found(State(sim): State<Sim>, request: Request) -> Response {
    sim.stats()
        .record(UNMATCHED, request.method().as_str(), 404);
    SimError::new(404, "404: Page Not Found").into_response()
}

async fn method_not_allowed(request: Request<Body>, next: Next) -> Response {
    let response = next.run(request).await;
    if response.status() == StatusCode::METHOD_NOT_ALLOWED {
        return SimError::new(405, "405: Method Not Allowed").into_response();
    }
    response
}

/// Counts every request a metal-api route answered, by route template, method and status.
async fn count_requests(State(sim): State<Sim>, request: Request, next: Next) -> Response {
    let base = sim.config.base_path.trim_end_matches('/').to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| {
            // `/metal/v1/…` without its base path; `/metalstack.api.v2.…` kept whole.
            let within = p
                .as_str()
                .strip_prefix(&base)
                .filter(|r| r.starts_with('/'));
            within.unwrap_or(p.as_str()).to_owned()
        })
        .unwrap_or_else(|| UNMATCHED.to_owned());
    let method = request.method().clone();
    let response = next.run(request).await;
    sim.stats()
        .record(&route, method.as_str(), response.status().as_u16());
    response
}

/// The simulator's router: metal-api under the configured base path, `/sim/faults`,
/// `/sim/stats` and `/sim/keys` beside it.
pub fn router(sim: Sim) -> Router {
    let api = api_router()
        .layer(middleware::from_fn_with_state(sim.clone(), filters))
        .layer(middleware::from_fn(method_not_allowed))
        .layer(middleware::from_fn_with_state(sim.clone(), count_requests));
    let base = sim.config.base_path.trim_end_matches('/').to_owned();
    let app = if base.is_empty() {
        api
    } else {
        Router::new().nest(&base, api)
    };
    // A route layer: it runs once the route matched, so it counts the call by its procedure.
    let v2 = crate::v2::router()
        .route_layer(middleware::from_fn_with_state(sim.clone(), count_requests));
    app.merge(v2)
        .route(
            "/sim/faults",
            get(control::faults_get).put(control::faults_put),
        )
        .route(
            "/sim/stats",
            get(control::stats_get).delete(control::stats_reset),
        )
        .route("/sim/keys", axum::routing::put(control::keys_put))
        .fallback(not_found)
        .with_state(sim)
}
