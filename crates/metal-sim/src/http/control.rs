//! The simulator's own endpoints beside metal-api: `/sim/faults` switches misbehaviour at run
//! time, `/sim/stats` reports (GET) and resets (DELETE) the request counts.

use super::*;
use crate::state::Faults;

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
