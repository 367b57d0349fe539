//! metal-api's routes as the simulator answers them: each handler checks the caller's role,
//! reads the body as metal-api does and hands over to the state.

use super::*;

type S = State<Sim>;
type Id = Extension<Identity>;

pub(super) async fn health() -> Response {
    ok(
        StatusCode::OK,
        &serde_json::json!({"status": "healthy", "message": "simulated metal-api is healthy", "services": {}}),
    )
}

pub(super) async fn version() -> Response {
    ok(
        StatusCode::OK,
        &serde_json::json!({"name": "metal-api", "version": "v0.44.1-capms-sim", "builddate": "", "revision": "", "gitsha1": "", "min_client_version": "v0.0.0", "release_version": "capms-simulator"}),
    )
}

pub(super) async fn user_me(Extension(identity): Id) -> Response {
    match require(&identity, Role::Viewer) {
        Ok(()) => ok(
            StatusCode::OK,
            &serde_json::json!({
                "EMail": identity.email(),
                "Name": identity.auth_type.map(|t| t.scheme()).unwrap_or_default(),
                "Groups": identity.groups(),
                "Tenant": identity.tenant,
                "Issuer": "",
                "Subject": "",
            }),
        ),
        Err(e) => e.into_response(),
    }
}

pub(super) fn respond<T: Serialize>(status: StatusCode, result: SimResult<T>) -> Response {
    match result {
        Ok(v) => ok(status, &v),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn partitions(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().partitions.values().cloned().collect::<Vec<_>>(),
    )
}

pub(super) async fn partition(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().partition(&id).cloned())
}

pub(super) async fn sizes(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().sizes.values().cloned().collect::<Vec<_>>(),
    )
}

pub(super) async fn size(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().size(&id).cloned())
}

pub(super) async fn images(State(sim): S) -> Response {
    ok(
        StatusCode::OK,
        &sim.state().images.values().cloned().collect::<Vec<_>>(),
    )
}

pub(super) async fn image(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().image(&id).cloned())
}

pub(super) async fn image_latest(State(sim): S, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, sim.state().image_latest(&id).cloned())
}

pub(super) async fn image_query(State(sim): S, Path(id): Path<String>) -> Response {
    let state = sim.state();
    let matching: Vec<Image> = state
        .images
        .values()
        .filter(|i| metal_api::images::matches(&id, &i.id))
        .cloned()
        .collect();
    ok(StatusCode::OK, &matching)
}

/// No role: metal-api lists size image constraints to anyone who passes the HMAC and tenant
/// filters, as it lists sizes.
pub(super) async fn size_image_constraints(State(sim): S) -> Response {
    let state = sim.state();
    let all: Vec<_> = state.size_image_constraints.values().cloned().collect();
    ok(StatusCode::OK, &all)
}

pub(super) async fn size_image_constraint(State(sim): S, Path(id): Path<String>) -> Response {
    respond(
        StatusCode::OK,
        sim.state().size_image_constraint(&id).cloned(),
    )
}

/// Admin only, as metal-api guards it.
pub(super) async fn size_image_try(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Admin)
        .and_then(|()| parse::<SizeImageConstraintTryRequest>(&body))
        .and_then(|req| sim.state().size_image_try(&req.size, &req.image))
        .map(|()| serde_json::json!({}));
    respond(StatusCode::OK, result)
}

pub(super) async fn projects(State(sim): S, Extension(identity): Id) -> Response {
    // metal-api's spec says array: an empty list is [], which every client reads.
    let result = require(&identity, Role::Viewer)
        .map(|()| sim.state().projects.values().cloned().collect::<Vec<_>>());
    respond(StatusCode::OK, result)
}

pub(super) async fn project(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().project(&id).cloned()),
    )
}

pub(super) async fn project_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<ProjectFindRequest>(&body))
        .map(|req| sim.state().project_find(&req));
    respond(StatusCode::OK, result)
}

pub(super) async fn networks(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer).map(|()| sim.state().network_list());
    respond(StatusCode::OK, result)
}

pub(super) async fn network(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().network(&id)),
    )
}

pub(super) async fn network_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<NetworkFindRequest>(&body))
        .map(|req| sim.state().network_find(&req));
    respond(StatusCode::OK, result)
}

pub(super) async fn network_allocate(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<NetworkAllocateRequest>(&body))
        .and_then(|req| sim.state().network_allocate(&req));
    respond(StatusCode::CREATED, result)
}

pub(super) async fn network_free(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Editor).and_then(|()| sim.state().network_free(&id)),
    )
}

pub(super) async fn ips(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer)
        .map(|()| sim.state().ips.values().cloned().collect::<Vec<_>>());
    respond(StatusCode::OK, result)
}

pub(super) async fn ip(
    State(sim): S,
    Extension(identity): Id,
    Path(address): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().ip(&address).cloned()),
    )
}

pub(super) async fn ip_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<IpFindRequest>(&body))
        .map(|req| sim.state().ip_find(&req));
    respond(StatusCode::OK, result)
}

pub(super) async fn ip_allocate(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<IpAllocateRequest>(&body))
        .and_then(|req| sim.state().ip_allocate(&req, None));
    respond(StatusCode::CREATED, result)
}

pub(super) async fn ip_allocate_specific(
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

pub(super) async fn ip_free(
    State(sim): S,
    Extension(identity): Id,
    Path(address): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Editor).and_then(|()| sim.state().ip_free(&address)),
    )
}

pub(super) fn list_machines(sim: &Sim, role: Option<&str>) -> Vec<Machine> {
    let state = sim.state();
    state
        .machines
        .values()
        .filter(|m| role.is_none_or(|r| m.allocation.as_ref().is_some_and(|a| a.role == r)))
        .map(|m| state.machine_view(m))
        .collect()
}

pub(super) async fn machines(State(sim): S, Extension(identity): Id) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).map(|()| list_machines(&sim, None)),
    )
}

pub(super) async fn machine(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().machine(&id)),
    )
}

pub(super) async fn machine_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineFindRequest>(&body))
        .map(|req| sim.state().machine_find(&req));
    respond(StatusCode::OK, result)
}

pub(super) fn allocate(
    sim: &Sim,
    identity: &Identity,
    req: &MachineAllocateRequest,
    rules: Option<&FirewallRules>,
    role: &str,
) -> SimResult<Machine> {
    require(identity, Role::Editor)?;
    let (machine, lease) = {
        let mut state = sim.state();
        let machine = state.machine_allocate(req, rules, role, &identity.email())?;
        let lease = state.lease(&machine.id);
        (machine, lease)
    };
    if let Some(lease) = lease {
        sim.spawn_install(machine.id.clone(), lease);
    }
    Ok(machine)
}

pub(super) async fn machine_allocate(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
    let result = parse::<MachineAllocateRequest>(&body)
        .and_then(|req| allocate(&sim, &identity, &req, None, ROLE_MACHINE));
    respond(StatusCode::OK, result)
}

pub(super) async fn machine_free(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
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

pub(super) async fn firewalls(State(sim): S, Extension(identity): Id) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).map(|()| list_machines(&sim, Some(ROLE_FIREWALL))),
    )
}

pub(super) async fn firewall(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().firewall(&id)),
    )
}

pub(super) async fn firewall_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineFindRequest>(&body))
        .map(|mut req| {
            req.allocation_role = Some(ROLE_FIREWALL.into());
            sim.state().machine_find(&req)
        });
    respond(StatusCode::OK, result)
}

pub(super) async fn firewall_allocate(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
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

pub(super) async fn image_find(State(sim): S, Extension(identity): Id, body: Bytes) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<ImageFindRequest>(&body))
        .map(|req| sim.state().image_find(&req));
    respond(StatusCode::OK, result)
}

/// No role: metal-api serves capacity to anyone who passes the HMAC and tenant filters.
pub(super) async fn partition_capacity(State(sim): S, body: Bytes) -> Response {
    let result = parse::<PartitionCapacityRequest>(&body)
        .and_then(|req| sim.state().partition_capacity(&req));
    respond(StatusCode::OK, result)
}

pub(super) async fn machine_issues(State(sim): S, Extension(identity): Id) -> Response {
    let result = require(&identity, Role::Viewer).map(|()| sim.state().issue_catalogue());
    respond(StatusCode::OK, result)
}

pub(super) async fn machine_issues_evaluate(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineIssuesRequest>(&body))
        .and_then(|req| sim.state().evaluate_issues(&req));
    respond(StatusCode::OK, result)
}
