//! A machine's health as a condition and a requeue.

use crate::reconciler::Requeue;
use crate::reconciler::conditions::Reason;
use metal_api::types::MachineHealth;

/// When to look again at a machine that is not ready: a provisioning machine soon (it is about
/// to progress), a failing one with the growing backoff (a person has to act).
pub(crate) fn health_requeue(health: &MachineHealth) -> Requeue {
    match health {
        MachineHealth::Ready => Requeue::Resync,
        MachineHealth::Provisioning(_) => Requeue::Booting,
        MachineHealth::CrashLoop | MachineHealth::FailedReclaim | MachineHealth::NotAlive(_) => {
            Requeue::Poll
        }
    }
}

/// (healthy, reason, message) of the health condition.
pub(crate) fn health_condition(health: &MachineHealth) -> (bool, Reason, String) {
    match health {
        MachineHealth::Ready => (true, Reason::PhonedHome, "the machine has phoned home and is alive".into()),
        MachineHealth::Provisioning(event) => (true, Reason::Provisioning, format!("provisioning; last event: {event}")),
        MachineHealth::CrashLoop => (false, Reason::CrashLoop, "the machine is in a crash loop (it PXE-boots again instead of phoning home); check its console in metal-stack".into()),
        MachineHealth::FailedReclaim => (false, Reason::FailedReclaim, "the machine phoned home after it was freed: its reclaim failed; an operator must reinstall it".into()),
        MachineHealth::NotAlive(l) => (false, Reason::NotAlive, format!("the machine phoned home but its liveliness is {l}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_reads_as_a_condition_and_a_requeue() {
        let (healthy, reason, _) = health_condition(&MachineHealth::CrashLoop);
        assert_eq!((healthy, reason), (false, Reason::CrashLoop));
        assert_eq!(
            health_requeue(&MachineHealth::Provisioning("Installing".into())),
            Requeue::Booting
        );
        assert_eq!(health_requeue(&MachineHealth::Ready), Requeue::Resync);
        assert_eq!(
            health_requeue(&MachineHealth::NotAlive("Dead".into())),
            Requeue::Poll
        );
    }
}
