//! metal-api's machine power, reinstall and IPMI routes. A power action's body (`EmptyBody`) is
//! never read, as metal-api never reads it; the LED actions take their `description` from the
//! query.

use super::handlers::respond;
use super::*;
use axum::extract::Query;
use std::collections::BTreeMap;

type S = State<Sim>;
type Id = Extension<Identity>;
type Params = Query<BTreeMap<String, String>>;

/// Carries out `action` and starts the reboot it causes.
fn power(
    sim: &Sim,
    identity: &Identity,
    id: &str,
    action: PowerAction,
    query: &Params,
) -> Response {
    let description = query.get("description").map_or("", String::as_str);
    let result = require(identity, Role::Editor)
        .and_then(|()| sim.state().machine_power(id, action, description))
        .map(|(machine, reboot)| {
            if let Some(lease) = reboot {
                sim.spawn_reboot(id.to_owned(), lease);
            }
            machine
        });
    respond(StatusCode::OK, result)
}

/// One handler per power route, each its own route as metal-api registers them.
macro_rules! power_handlers {
    ($($name:ident => $action:ident),* $(,)?) => {
        $(
            pub(super) async fn $name(
                State(sim): S,
                Extension(identity): Id,
                Path(id): Path<String>,
                query: Params,
            ) -> Response {
                power(&sim, &identity, &id, PowerAction::$action, &query)
            }
        )*
    };
}

power_handlers! {
    power_on => On,
    power_off => Off,
    power_reset => Reset,
    power_cycle => Cycle,
    power_bios => Bios,
    power_disk => Disk,
    power_pxe => Pxe,
    power_led_on => ChassisIdentifyLedOn,
    power_led_off => ChassisIdentifyLedOff,
}

pub(super) async fn machine_reinstall(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Editor)
        .and_then(|()| parse::<MachineReinstallRequest>(&body))
        .and_then(|req| sim.state().machine_reinstall(&id, &req))
        .map(|(machine, lease)| {
            sim.spawn_reboot(id.clone(), lease);
            machine
        });
    respond(StatusCode::OK, result)
}

pub(super) async fn machine_ipmi_find(
    State(sim): S,
    Extension(identity): Id,
    body: Bytes,
) -> Response {
    let result = require(&identity, Role::Viewer)
        .and_then(|()| parse::<MachineFindRequest>(&body))
        .map(|req| sim.state().ipmi_find(&req));
    respond(StatusCode::OK, result)
}

pub(super) async fn machine_ipmi(
    State(sim): S,
    Extension(identity): Id,
    Path(id): Path<String>,
) -> Response {
    respond(
        StatusCode::OK,
        require(&identity, Role::Viewer).and_then(|()| sim.state().machine_ipmi(&id)),
    )
}
