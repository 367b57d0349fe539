//! Deleting a MetalStackCluster: wait for its machines, free the machines it records as
//! retired, delete its firewall and wait for it, then free the control-plane IP and the network
//! capms allocated (never ones it did not).

use super::model::{ClusterDecision, ClusterStep, Left};
use crate::api::{MetalStackCluster, MetalStackClusterStatus};
use crate::reconciler::conditions::{Conditions, Reason, Type};
use crate::reconciler::{Decision, Requeue};
use std::time::Duration;

pub(crate) fn decide(
    msc: &MetalStackCluster,
    left: &Left,
    mut status: MetalStackClusterStatus,
) -> ClusterDecision {
    status.ready = false;
    status.initialization = None;
    if left.ips.is_empty() {
        status.allocated_control_plane_ip = None;
    }
    let mut conditions = Conditions::of(&mut status.conditions, msc.metadata.generation);
    let (step, reason, message, next) = if left.machines > 0 {
        let message = format!(
            "deleting: waiting for {} MetalStackMachine(s) of the cluster to go",
            left.machines
        );
        let next = Requeue::After(Duration::from_secs(5));
        (
            ClusterStep::Nothing,
            Reason::WaitingForMachines,
            message,
            next,
        )
    } else if let Some((id, owner)) = left.retired.first() {
        let message = format!("deleting: freeing retired machine {id}");
        let step = ClusterStep::FreeRetired(id.clone(), owner.clone());
        (step, Reason::Deleting, message, Requeue::Now)
    } else if let Some((name, _)) = left.firewalls.first() {
        let message = format!("deleting: waiting for MetalStackFirewall {name} to go");
        let step = match left.firewalls.iter().find(|(_, deleting)| !deleting) {
            Some((name, _)) => ClusterStep::DeleteFirewall(name.clone()),
            None => ClusterStep::Nothing,
        };
        let next = Requeue::After(Duration::from_secs(2));
        (step, Reason::WaitingForFirewall, message, next)
    } else if let Some(ip) = left.ips.first() {
        let message = format!("deleting: freeing control-plane IP {ip}");
        (
            ClusterStep::FreeIp(ip.clone()),
            Reason::Deleting,
            message,
            Requeue::Now,
        )
    } else if let Some(id) = left.networks.first() {
        let message = format!("deleting: freeing private network {id}");
        (
            ClusterStep::FreeNetwork(id.clone()),
            Reason::Deleting,
            message,
            Requeue::Now,
        )
    } else {
        let message = "deleting: everything capms allocated is freed".to_owned();
        (
            ClusterStep::RemoveFinalizer,
            Reason::Deleting,
            message,
            Requeue::AwaitChange,
        )
    };
    conditions.set_false(Type::Ready, reason, message);
    Decision::new(step, status, next)
}

/// metal-api refuses to free a network whose prefixes still hold IPs (422) while it releases
/// the machines' IPs asynchronously: that is a wait, not a failure.
pub(crate) fn network_still_busy(
    msc: &MetalStackCluster,
    mut status: MetalStackClusterStatus,
    id: &str,
    error: &metal_api::Error,
) -> (MetalStackClusterStatus, Requeue) {
    Conditions::of(&mut status.conditions, msc.metadata.generation).set_false(
        Type::Ready,
        Reason::WaitingForNetworkRelease,
        format!("deleting: network {id} still holds IPs: {error}"),
    );
    (status, Requeue::After(Duration::from_secs(2)))
}
