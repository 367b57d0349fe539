//! The simulator's own endpoints beside metal-api: `/sim/faults` switches misbehaviour at run
//! time, `/sim/stats` reports (GET) and resets (DELETE) the request counts, `/sim/keys` (PUT)
//! rotates HMAC keys.

use super::*;
use crate::state::Faults;
use std::collections::BTreeMap;

pub(super) async fn faults_get(State(sim): State<Sim>) -> Response {
    ok(StatusCode::OK, &sim.state().faults)
}

pub(super) async fn faults_put(State(sim): State<Sim>, body: Bytes) -> Response {
    let faults = match parse::<Faults>(&body) {
        Ok(faults) => faults,
        Err(e) => return e.into_response(),
    };
    let mut state = sim.state();
    if let Err(message) = faults.check(|id| state.machines.contains_key(id)) {
        return SimError::bad_request(message).into_response();
    }
    state.faults = faults.clone();
    drop(state);
    tracing::info!(?faults, "simulator faults changed");
    ok(StatusCode::OK, &faults)
}

pub(super) async fn stats_get(State(sim): State<Sim>) -> Response {
    let report = sim.stats().report();
    ok(StatusCode::OK, &report)
}

pub(super) async fn stats_reset(State(sim): State<Sim>) -> Response {
    sim.stats().reset();
    let report = sim.stats().report();
    ok(StatusCode::OK, &report)
}

/// `PUT /sim/keys` with `{"Metal-Edit": "<new key>", …}`: those keys rotated, the others kept.
/// The answer names the auth types whose keys changed, never a key.
pub(super) async fn keys_put(State(sim): State<Sim>, body: Bytes) -> Response {
    let keys = match parse::<BTreeMap<String, String>>(&body) {
        Ok(keys) => keys,
        Err(e) => return e.into_response(),
    };
    let mut rotated = Vec::new();
    for (scheme, key) in keys {
        let Some(auth_type) = AuthType::from_scheme(&scheme) else {
            let message =
                format!("unknown auth type {scheme:?}; valid: Metal-View, Metal-Edit, Metal-Admin");
            return SimError::bad_request(message).into_response();
        };
        if key.is_empty() {
            return SimError::bad_request(format!("the key of {scheme} is empty")).into_response();
        }
        rotated.push((auth_type, key));
    }
    let schemes: Vec<&str> = rotated.iter().map(|(a, _)| a.scheme()).collect();
    tracing::info!(?schemes, "simulator HMAC keys rotated");
    let answer = serde_json::json!({"rotated": schemes});
    for (auth_type, key) in rotated {
        sim.rotate_hmac_key(auth_type, key);
    }
    ok(StatusCode::OK, &answer)
}
