//! What a MetalStackCluster needs next, decided from what was observed, without I/O: its
//! private network, its control-plane IP and endpoint, its firewall (`firewall`), and on
//! deletion the teardown in reverse (`teardown`).

use super::model::{
    ClusterDecision, ClusterGate, ClusterStep, EndpointSeen, NetworkSeen, Observed,
};
use super::requests::{ip_request, network_request};
use super::rollout::Outcome;
use super::{firewall, teardown};
use crate::api::{ApiEndpoint, Initialization, MetalStackCluster, MetalStackClusterStatus};
use crate::reconciler::conditions::{self, Conditions, Reason, Type};
use crate::reconciler::gates::report_pause;
use crate::reconciler::{Decision, Error, Phase, Requeue};
use kube::ResourceExt;
use metal_api::types::{IP_TYPE_EPHEMERAL, IP_TYPE_STATIC};
use std::time::Duration;

/// How long to wait for a Cluster that does not exist (yet).
const ABSENT: Duration = Duration::from_secs(10);

pub(crate) fn decide(msc: &MetalStackCluster, observed: &Observed) -> ClusterDecision {
    let status = msc.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(ClusterStep::Nothing, status, next),
        Phase::Teardown(left) => teardown::decide(msc, left, status),
        Phase::Live(gate) => decide_live(msc, gate, status),
    }
}

fn decide_live(
    msc: &MetalStackCluster,
    gate: &ClusterGate,
    mut status: MetalStackClusterStatus,
) -> ClusterDecision {
    let ns = msc.namespace().unwrap_or_default();
    let mut conditions = Conditions::of(&mut status.conditions, msc.metadata.generation);
    let stages = match gate {
        ClusterGate::NoOwner => {
            let message = "waiting for Cluster API to set the owning Cluster";
            conditions.set_false(Type::Ready, Reason::WaitingForClusterOwnerRef, message);
            return Decision::new(ClusterStep::Nothing, status, Requeue::AwaitChange);
        }
        ClusterGate::NoCluster { owner } => {
            let message = format!("Cluster {ns}/{owner} does not exist (yet)");
            conditions.set_false(Type::Ready, Reason::WaitingForCluster, message);
            return Decision::new(ClusterStep::Nothing, status, Requeue::After(ABSENT));
        }
        ClusterGate::Paused(why) => {
            report_pause(&mut conditions, Some(why));
            return Decision::new(ClusterStep::Nothing, status, Requeue::AwaitChange);
        }
        ClusterGate::NotTakenUp => {
            report_pause(&mut conditions, None);
            return Decision::new(ClusterStep::AddFinalizer, status, Requeue::AwaitChange);
        }
        ClusterGate::Open(stages) => {
            report_pause(&mut conditions, None);
            stages
        }
    };
    if let Some(racks) = &stages.failure_domains {
        status.failure_domains = super::failure_domains::listed(racks, &msc.spec.partition);
    }
    let mut progress = Progress { msc, status };
    let step = match progress.network(stages.network.as_ref()) {
        Ok(None) => match progress.endpoint(stages.endpoint.as_ref()) {
            Ok(None) => return progress.firewall(&stages.owner, stages.firewall.as_ref()),
            other => other,
        },
        other => other,
    };
    progress.provisioning(step)
}

/// A step towards provisioning: Some(step) when one is to be taken, Err when the spec is
/// unusable.
type Towards = Result<Option<(ClusterStep, Requeue)>, Error>;

struct Progress<'a> {
    msc: &'a MetalStackCluster,
    status: MetalStackClusterStatus,
}

impl Progress<'_> {
    fn conditions(&mut self) -> Conditions<'_> {
        Conditions::of(&mut self.status.conditions, self.msc.metadata.generation)
    }

    /// Ready=False while a step is under way (or the reason it cannot be).
    fn provisioning(mut self, towards: Towards) -> ClusterDecision {
        let sticky = self.status.ready;
        if !sticky {
            self.status.initialization = None;
        }
        match towards {
            Ok(Some((step, next))) => {
                let message = "provisioning; see the other conditions";
                self.conditions()
                    .set_false(Type::Ready, Reason::Provisioning, message);
                Decision::new(step, self.status, next)
            }
            Ok(None) => Decision::new(ClusterStep::Nothing, self.status, Requeue::Poll),
            Err(error) => {
                let status = after_failure(self.msc, self.status, &error, None);
                Decision::failed(ClusterStep::Nothing, status, error)
            }
        }
    }

    fn network(&mut self, seen: Option<&NetworkSeen>) -> Towards {
        let spec = &self.msc.spec;
        let (id, step) = match (seen, &spec.private_network_id) {
            (None, _) => return Ok(Some((ClusterStep::Nothing, Requeue::Poll))),
            (Some(NetworkSeen::GivenMissing { choices }), Some(id)) => {
                let message = crate::networks::missing(id, choices);
                let error = Error::Invalid(format!("spec.privateNetworkID: {message}"));
                let reason = Reason::Failed(error.category());
                self.conditions()
                    .set_false(Type::NetworkReady, reason, error.to_string());
                return Err(error);
            }
            (Some(NetworkSeen::Given { ours }), Some(id)) => {
                if *ours {
                    self.status.allocated_network_id = Some(id.clone());
                }
                (id.clone(), None)
            }
            (Some(NetworkSeen::Allocated(id)), _) => {
                self.status.allocated_network_id = Some(id.clone());
                (id.clone(), None)
            }
            (Some(_), _) => {
                let request = network_request(self.msc);
                let message = format!(
                    "allocating a private network in partition {}",
                    spec.partition
                );
                self.conditions()
                    .set_false(Type::NetworkReady, Reason::Allocating, message);
                let step = ClusterStep::AllocateNetwork(Box::new(request));
                return Ok(Some((step, Requeue::Now)));
            }
        };
        self.status.network_id = Some(id.clone());
        let message = format!("private network {id}");
        self.conditions()
            .set_true(Type::NetworkReady, Reason::NetworkReady, message);
        Ok(step)
    }

    fn endpoint(&mut self, seen: Option<&EndpointSeen>) -> Towards {
        let spec = &self.msc.spec;
        let endpoint = spec.control_plane_endpoint.clone().unwrap_or_default();
        let given = endpoint.host.clone().filter(|h| !h.is_empty());
        // spec.controlPlaneIP is the Go provider's field, and its API servers listen on 443.
        let default_port = match (&given, &spec.control_plane_ip) {
            (None, Some(_)) => crate::api::v1alpha1::API_PORT,
            _ => crate::api::common::DEFAULT_API_PORT,
        };
        let port = endpoint.port.unwrap_or(default_port);
        let host = match (seen, given) {
            (None, _) => return Ok(Some((ClusterStep::Nothing, Requeue::Poll))),
            (Some(EndpointSeen::PublicNetworkUnusable(message)), _) => {
                let error = Error::Invalid(format!("spec.publicNetworkID: {message}"));
                let reason = Reason::Failed(error.category());
                self.conditions()
                    .set_false(Type::ControlPlaneIpReady, reason, error.to_string());
                return Err(error);
            }
            (Some(EndpointSeen::Allocated { network, ip: None }), _) => {
                let request = ip_request(self.msc, network, IP_TYPE_EPHEMERAL, "allocated");
                let step = ClusterStep::AllocateIp(Box::new(request));
                return Ok(Some(self.allocating(network, step)));
            }
            (Some(EndpointSeen::Free { network }), Some(host)) => {
                let request = ip_request(self.msc, network, IP_TYPE_STATIC, "reserved");
                let step = ClusterStep::ReserveIp(host, Box::new(request));
                return Ok(Some(self.allocating(network, step)));
            }
            (
                Some(EndpointSeen::Allocated { ip: Some(ip), .. } | EndpointSeen::Reserved(ip)),
                _,
            ) => {
                self.status.allocated_control_plane_ip = Some(ip.clone());
                ip.clone()
            }
            (Some(_), Some(host)) => host,
            (Some(_), None) => match &spec.control_plane_ip {
                Some(ip) => ip.clone(),
                None => return Ok(Some((ClusterStep::Nothing, Requeue::Poll))),
            },
        };
        let message = format!("control-plane endpoint {host}:{port}");
        self.conditions().set_true(
            Type::ControlPlaneIpReady,
            Reason::ControlPlaneIpReady,
            message,
        );
        if endpoint.host.as_deref() != Some(host.as_str()) || endpoint.port != Some(port) {
            let patch = ApiEndpoint {
                host: Some(host),
                port: Some(port),
            };
            // The patch's watch event brings the cluster back.
            return Ok(Some((
                ClusterStep::PatchEndpoint(patch),
                Requeue::AwaitChange,
            )));
        }
        Ok(None)
    }

    fn allocating(&mut self, network: &str, step: ClusterStep) -> (ClusterStep, Requeue) {
        let message = format!("allocating the control-plane IP in network {network}");
        self.conditions()
            .set_false(Type::ControlPlaneIpReady, Reason::Allocating, message);
        (step, Requeue::Now)
    }

    fn firewall(
        mut self,
        cluster_name: &str,
        seen: Option<&super::model::FirewallSeen>,
    ) -> ClusterDecision {
        let mut conditions =
            Conditions::of(&mut self.status.conditions, self.msc.metadata.generation);
        let rollout = &mut self.status.firewall;
        match firewall::decide(self.msc, cluster_name, seen, &mut conditions, rollout) {
            Outcome::Ready => self.ready(ClusterStep::Nothing, Requeue::Resync),
            Outcome::Serving(step, next) => self.ready(step, next),
            Outcome::ClusterStep(step, next) => self.provisioning(Ok(Some((step, next)))),
        }
    }

    /// Ready: network, endpoint and a serving firewall; `step` is a firewall rollout's.
    fn ready(mut self, step: ClusterStep, next: Requeue) -> ClusterDecision {
        self.status.ready = true;
        self.status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        self.status.failure_reason = None;
        self.status.failure_message = None;
        let message = "network, control-plane IP and firewall are ready";
        self.conditions()
            .set_true(Type::Ready, Reason::Provisioned, message);
        // A ready cluster is looked at again within the sync period, whatever its step awaits.
        let next = match next {
            Requeue::AwaitChange => Requeue::Resync,
            other => other,
        };
        Decision::new(step, self.status, next)
    }
}

/// The status after a failed step or an unusable spec: Ready says why, and so does the
/// condition of the step that failed.
pub(crate) fn after_failure(
    msc: &MetalStackCluster,
    mut status: MetalStackClusterStatus,
    error: &Error,
    step: Option<&ClusterStep>,
) -> MetalStackClusterStatus {
    after_failed_step(msc, &mut status, error, step);
    if !status.ready {
        status.initialization = None;
    }
    status
}

/// Ready=False with the error's reason, and the condition of `step` too.
fn after_failed_step(
    msc: &MetalStackCluster,
    status: &mut MetalStackClusterStatus,
    error: &Error,
    step: Option<&ClusterStep>,
) {
    let unfinished = |list: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], type_| {
        conditions::find(list, type_).is_none_or(|c| c.status != "True")
    };
    let failed = match step {
        Some(ClusterStep::AllocateNetwork(_)) => Some(Type::NetworkReady),
        Some(ClusterStep::AllocateIp(_) | ClusterStep::ReserveIp(..)) => {
            Some(Type::ControlPlaneIpReady)
        }
        Some(_) => None,
        // Met while observing: it concerns the first step not done yet.
        None if unfinished(&status.conditions, Type::NetworkReady) => Some(Type::NetworkReady),
        None if unfinished(&status.conditions, Type::ControlPlaneIpReady) => {
            Some(Type::ControlPlaneIpReady)
        }
        None => None,
    };
    let mut conditions = Conditions::of(&mut status.conditions, msc.metadata.generation);
    let reason = Reason::Failed(error.category());
    if let Some(type_) = failed {
        conditions.set_false(type_, reason, error.to_string());
    }
    conditions.set_false(Type::Ready, reason, error.to_string());
}
