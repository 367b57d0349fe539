//! HTTP face of the simulator: metal-api's routes, filters (HMAC, tenant, role) and error
//! encoding, plus `/sim/faults`, the fault-injection endpoint that is not part of metal-api.

use super::Sim;
use super::state::{Faults, SimError, SimResult};
use crate::metal::error::encode_error_body;
use crate::metal::hmac::{self, AuthType};
use crate::metal::types::*;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use rand::Rng;
use serde::{Serialize, de::DeserializeOwned};
use std::time::Duration;

/// Who is calling, after the HMAC check.
#[derive(Clone, Debug)]
struct Identity {
    auth_type: Option<AuthType>,
    tenant: String,
}

impl Identity {
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
}

impl Role {
    fn accepts(self, auth: Option<AuthType>) -> bool {
        matches!(
            (self, auth),
            (Role::Viewer, Some(_)) | (Role::Editor, Some(AuthType::Edit | AuthType::Admin))
        )
    }

    fn groups(self) -> &'static str {
        match self {
            Role::Viewer => {
                "k8s_kaas-view maas-all-all-view k8s_kaas-edit maas-all-all-edit k8s_kaas-admin maas-all-all-admin"
            }
            Role::Editor => "k8s_kaas-edit maas-all-all-edit k8s_kaas-admin maas-all-all-admin",
        }
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

fn parse<T: DeserializeOwned>(body: &Bytes) -> SimResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| SimError::bad_request(format!("cannot read request: {e}")))
}

/// Fault injection, HMAC check, tenant filter: in metal-api's order.
async fn filters(State(sim): State<Sim>, mut request: Request, next: Next) -> Response {
    let faults = sim.state().faults.clone();
    if faults.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    }
    if faults.error_rate > 0.0 && rand::rng().random_bool(faults.error_rate.clamp(0.0, 1.0)) {
        return SimError::new(503, "injected fault: service unavailable").into_response();
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
    next.run(request).await
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
    let Some(key) = sim.config.keys.keys.get(&auth_type) else {
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

type S = State<Sim>;
type Id = Extension<Identity>;

async fn health() -> Response {
    ok(
        StatusCode::OK,
        &serde_json::json!({"status": "healthy", "message": "simulated metal-api is healthy", "services": {}}),
    )
}

async fn version() -> Response {
    ok(
        StatusCode::OK,
        &serde_json::json!({"name": "metal-api", "version": "v0.44.1-capms-sim", "builddate": "", "revision": "", "gitsha1": "", "min_client_version": "v0.0.0", "release_version": null}),
    )
}

async fn user_me(Extension(identity): Id) -> Response {
    match require(&identity, Role::Viewer) {
        Ok(()) => ok(
            StatusCode::OK,
            &serde_json::json!({"EMail": identity.email(), "Name": identity.auth_type.map(|t| t.scheme()), "Groups": [], "Tenant": identity.tenant}),
        ),
        Err(e) => e.into_response(),
    }
}

fn respond<T: Serialize>(status: StatusCode, result: SimResult<T>) -> Response {
    match result {
        Ok(v) => ok(status, &v),
        Err(e) => e.into_response(),
    }
}

async fn partitions(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().partitions.values().cloned().collect::<Vec<_>>(),
    )
}

async fn partition(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().partition(&id).cloned())
}

async fn sizes(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().sizes.values().cloned().collect::<Vec<_>>(),
    )
}

async fn size(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().size(&id).cloned())
}

async fn images(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().images.values().cloned().collect::<Vec<_>>(),
    )
}

async fn image(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().image(&id).cloned())
}

async fn image_latest(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().image_latest(&id).cloned())
}

async fn image_query(State(sim): S, Path(id): Path<String>) -> Response {
    let state = sim.state();
    let matching: Vec<Image> = state
        .images
        .values()
        .filter(|i| crate::metal::images::matches(&id, &i.id))
        .cloned()
        .collect();
    ok(StatusCode::OK, &matching)
}

async fn projects(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer).map(|()| {
        let all: Vec<Project> = sim.state().projects.values().cloned().collect();
        // metal-api answers null, not [], when there are none.
        if all.is_empty() { None } else { Some(all) }
    });
    respond(StatusCode::OK, result)
}

async fn project(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().project(&id).cloned()),
    )
}

async fn project_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Find {
        id: Option<String>,
        name: Option<String>,
        tenant_id: Option<String>,
    }
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<Find>(&body))
        .map(|f| {
            let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
            sim.state()
                .projects
                .values()
                .filter(|p| {
                    eq(&f.id, &p.meta.id) && eq(&f.name, &p.name) && eq(&f.tenant_id, &p.tenant_id)
                })
                .cloned()
                .collect::<Vec<_>>()
        });
    respond(StatusCode::OK, result)
}

async fn networks(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer).map(|()| {
        let all = sim.state().network_list();
        if all.is_empty() { None } else { Some(all) }
    });
    respond(StatusCode::OK, result)
}

async fn network(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().network(&id)),
    )
}

async fn network_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<NetworkFindRequest>(&body))
        .map(|req| sim.state().network_find(&req));
    respond(StatusCode::OK, result)
}

async fn network_allocate(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<NetworkAllocateRequest>(&body))
        .and_then(|req| sim.state().network_allocate(&req));
    respond(StatusCode::CREATED, result)
}

async fn network_free(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Editor).and_then(|()| sim.state().network_free(&id)),
    )
}

async fn ips(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer)
        .map(|()| sim.state().ips.values().cloned().collect::<Vec<_>>());
    respond(StatusCode::OK, result)
}

async fn ip(State(sim): S, Extension(identity): Id, Path(address): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().ip(&address).cloned()),
    )
}

async fn ip_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<IpFindRequest>(&body))
        .map(|req| sim.state().ip_find(&req));
    respond(StatusCode::OK, result)
}

async fn ip_allocate(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<IpAllocateRequest>(&body))
        .and_then(|req| sim.state().ip_allocate(&req, None));
    respond(StatusCode::CREATED, result)
}

async fn ip_allocate_specific(
    State(sim): S,
    Extension(identity): Id,
    Path(address): Path<String>,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<IpAllocateRequest>(&body))
        .and_then(|req| sim.state().ip_allocate(&req, Some(&address)));
    respond(StatusCode::CREATED, result)
}

async fn ip_free(State(sim): S, Extension(identity): Id, Path(address): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Editor).and_then(|()| sim.state().ip_free(&address)),
    )
}

fn list_machines(sim: &Sim, role: Option<&str>) -> Vec<Machine> {
    let state = sim.state();
    state
        .machines
        .values()
        .filter(|m| role.is_none_or(|r| m.allocation.as_ref().is_some_and(|a| a.role == r)))
        .map(|m| state.machine_view(m))
        .collect()
}

async fn machines(State(sim): S, Extension(identity): Id) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).map(|()| list_machines(&sim, None)),
    )
}

async fn machine(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().machine(&id)),
    )
}

async fn machine_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineFindRequest>(&body))
        .map(|req| sim.state().machine_find(&req));
    respond(StatusCode::OK, result)
}

fn allocate(
    sim: &Sim,
    identity: &Identity,
    req: &MachineAllocateRequest,
    rules: Option<&FirewallRules>,
    role: &str,
) -> SimResult<Machine> {
    require(identity, Role::Editor)?;
    let machine = sim
        .state()
        .machine_allocate(req, rules, role, &identity.email())?;
    if let Some(a) = &machine.allocation {
        sim.spawn_install(machine.id.clone(), a.allocationuuid.clone());
    }
    Ok(machine)
}

async fn machine_allocate(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = parse::<MachineAllocateRequest>(&body)
        .and_then(|req| allocate(&sim, &identity, &req, None, ROLE_MACHINE));
    respond(StatusCode::OK, result)
}

async fn machine_free(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| sim.state().machine_free(&id))
        .map(|(machine, was_allocated)| {
            if was_allocated {
                sim.spawn_reclaim(id.clone());
            }
            machine
        });
    respond(StatusCode::OK, result)
}

async fn firewalls(State(sim): S, Extension(identity): Id) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).map(|()| list_machines(&sim, Some(ROLE_FIREWALL))),
    )
}

async fn firewall(State(sim): S, Extension(identity): Id, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().firewall(&id)),
    )
}

async fn firewall_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineFindRequest>(&body))
        .map(|mut req| {
            req.allocation_role = Some(ROLE_FIREWALL.into());
            sim.state().machine_find(&req)
        });
    respond(StatusCode::OK, result)
}

async fn firewall_allocate(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = parse::<FirewallCreateRequest>(&body).and_then(|req| {
        allocate(
            &sim,
            &identity,
            &req.machine,
            Some(&req.firewall_rules.unwrap_or_default()),
            ROLE_FIREWALL,
        )
    });
    respond(StatusCode::OK, result)
}

async fn faults_get(State(sim): S) -> Response {
    ok(StatusCode::OK, &sim.state().faults)
}

async fn faults_put(State(sim): S, body: Bytes) -> Response {
    match parse::<Faults>(&body) {
        Ok(faults)
            if (0.0..=1.0).contains(&faults.error_rate)
                && (0.0..=1.0).contains(&faults.drop_rate) =>
        {
            sim.state().faults = faults.clone();
            tracing::info!(?faults, "simulator faults changed");
            ok(StatusCode::OK, &faults)
        }
        Ok(_) => SimError::bad_request("error_rate and drop_rate are fractions between 0 and 1")
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Registers a collection route both with and without the trailing slash, as go-restful does.
fn both<F>(router: Router<Sim>, path: &str, method_router: F) -> Router<Sim>
where
    F: Fn() -> axum::routing::MethodRouter<Sim>,
{
    router
        .route(path, method_router())
        .route(&format!("{path}/"), method_router())
}

fn metal_api_routes() -> Router<Sim> {
    let mut r = Router::new();
    r = both(r, "/v1/health", || get(health));
    r = both(r, "/v1/version", || get(version));
    r = r.route("/v1/user/me", get(user_me));
    r = both(r, "/v1/partition", || get(partitions));
    r = r.route("/v1/partition/{id}", get(partition));
    r = both(r, "/v1/size", || get(sizes));
    r = r.route("/v1/size/{id}", get(size));
    r = both(r, "/v1/image", || get(images));
    r = r.route("/v1/image/{id}", get(image));
    r = r.route("/v1/image/{id}/latest", get(image_latest));
    r = r.route("/v1/image/{id}/query", get(image_query));
    r = both(r, "/v1/project", || get(projects));
    r = r.route("/v1/project/find", post(project_find));
    r = r.route("/v1/project/{id}", get(project));
    r = both(r, "/v1/network", || get(networks));
    r = r.route("/v1/network/find", post(network_find));
    r = r.route("/v1/network/allocate", post(network_allocate));
    r = r.route(
        "/v1/network/free/{id}",
        delete(network_free).post(network_free),
    );
    r = r.route("/v1/network/{id}", get(network));
    r = both(r, "/v1/ip", || get(ips));
    r = r.route("/v1/ip/find", post(ip_find));
    r = r.route("/v1/ip/allocate", post(ip_allocate));
    r = r.route("/v1/ip/allocate/{ip}", post(ip_allocate_specific));
    r = r.route("/v1/ip/free/{ip}", delete(ip_free));
    r = r.route("/v1/ip/{ip}", get(ip));
    r = both(r, "/v1/machine", || get(machines));
    r = r.route("/v1/machine/find", post(machine_find));
    r = r.route("/v1/machine/allocate", post(machine_allocate));
    r = r.route("/v1/machine/{id}/free", delete(machine_free));
    r = r.route("/v1/machine/{id}", get(machine));
    r = both(r, "/v1/firewall", || get(firewalls));
    r = r.route("/v1/firewall/find", post(firewall_find));
    r = r.route("/v1/firewall/allocate", post(firewall_allocate));
    r = r.route("/v1/firewall/{id}", get(firewall));
    r
}

async fn not_found() -> Response {
    SimError::new(404, "404: Page Not Found").into_response()
}

async fn method_not_allowed(request: Request<Body>, next: Next) -> Response {
    let response = next.run(request).await;
    if response.status() == StatusCode::METHOD_NOT_ALLOWED {
        return SimError::new(405, "405: Method Not Allowed").into_response();
    }
    response
}

/// The simulator's router: metal-api under the configured base path, `/sim/faults` beside it.
pub fn router(sim: Sim) -> Router {
    let api = metal_api_routes()
        .layer(middleware::from_fn_with_state(sim.clone(), filters))
        .layer(middleware::from_fn(method_not_allowed));
    let base = sim.config.base_path.trim_end_matches('/').to_owned();
    let app = if base.is_empty() {
        api
    } else {
        Router::new().nest(&base, api)
    };
    app.route("/sim/faults", get(faults_get).put(faults_put))
        .fallback(not_found)
        .with_state(sim)
}

/// A listener that closes a configurable fraction of new connections before reading a request.
pub struct FaultyListener {
    pub inner: tokio::net::TcpListener,
    pub sim: Sim,
}

impl axum::serve::Listener for FaultyListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let drop_rate = self.sim.state().faults.drop_rate;
                    if drop_rate > 0.0 && rand::rng().random_bool(drop_rate.clamp(0.0, 1.0)) {
                        drop(io);
                        continue;
                    }
                    return (io, addr);
                }
                // Accept errors (e.g. too many open files) are transient; back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
