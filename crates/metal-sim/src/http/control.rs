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
            if [
                faults.error_rate,
                faults.drop_rate,
                faults.lost_answer_rate,
                faults.timeout_rate,
                faults.spike_rate,
            ]
            .iter()
            .all(|r| (0.0..=1.0).contains(r)) =>
        {
            sim.state().faults = faults.clone();
            tracing::info!(?faults, "simulator faults changed");
            ok(StatusCode::OK, &faults)
        }
        Ok(_) => SimError::bad_request(
            "error_rate, drop_rate, lost_answer_rate, timeout_rate and spike_rate are fractions between 0 and 1",
        )
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
