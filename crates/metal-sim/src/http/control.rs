//! The simulator's own endpoints beside metal-api: `/sim/faults` switches misbehaviour at run
//! time, `/sim/stats` reports (GET) and resets (DELETE) the request counts.

use super::*;
use crate::state::Faults;

pub(super) async fn faults_get(State(sim): State<Sim>) -> Response {
    ok(StatusCode::OK, &sim.state().faults)
}

pub(super) async fn faults_put(State(sim): State<Sim>, body: Bytes) -> Response {
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

pub(super) async fn stats_get(State(sim): State<Sim>) -> Response {
    let report = sim.stats().report();
    ok(StatusCode::OK, &report)
}

pub(super) async fn stats_reset(State(sim): State<Sim>) -> Response {
    sim.stats().reset();
    let report = sim.stats().report();
    ok(StatusCode::OK, &report)
}
