//! What a MetalStackFirewall needs next, decided from what was observed, without I/O.

use super::FINALIZER;
use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus, Protocol};
use crate::capi::Cluster;
use crate::controllers::allocation::{Found, Health, Target};
use crate::controllers::context::*;
use crate::controllers::step::{Decision, Phase, Requeue};
use kube::ResourceExt;
use metal_api::ProviderId;
use metal_api::types::{
    AllocationNetwork, FirewallCreateRequest, FirewallEgressRule, FirewallIngressRule,
    FirewallRules, Machine, MachineAllocateRequest,
};
use std::time::Duration;

/// How long to wait for a MetalStackCluster that does not exist (yet).
const ABSENT: Duration = Duration::from_secs(10);

/// What observe read. Deleting carries the ids of the machines still allocated for it.
pub type Observed = crate::controllers::step::Observed<Live, Vec<String>>;

/// Read in the order decide looks at it: a later field is None when an earlier gate stopped
/// the reading.
#[derive(Debug, Default)]
pub struct Live {
    /// The MetalStackCluster the firewall belongs to (owner reference or cluster-name label).
    pub infrastructure: Option<MetalStackCluster>,
    /// That MetalStackCluster's Cluster, for the pause.
    pub cluster: Option<Cluster>,
    /// The cluster's private network, as far as it exists.
    pub network: Option<String>,
    pub found: Option<Found>,
}

#[derive(Debug, PartialEq)]
pub enum Step {
    Nothing,
    AddFinalizer,
    Allocate(Box<FirewallCreateRequest>),
    /// Merge patch naming the machine in spec.providerID.
    Record(serde_json::Value),
    Free(String),
    RemoveFinalizer,
}

pub type FirewallDecision = Decision<Step, MetalStackFirewallStatus>;

/// Which machine the firewall means: the one noted in status, else spec.providerID's.
pub fn target(fw: &MetalStackFirewall, msc: &MetalStackCluster) -> Result<Target, String> {
    let recorded = fw.status.as_ref().and_then(|s| s.machine_id.as_deref());
    Target::of(
        fw.spec.provider_id.as_deref(),
        &msc.spec.partition,
        recorded,
    )
}

pub fn decide(fw: &MetalStackFirewall, observed: &Observed) -> FirewallDecision {
    let mut status = fw.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(Step::Nothing, status, next),
        Phase::Teardown(owned) => {
            status.ready = false;
            Conditions::of(&mut status.conditions, fw.metadata.generation).set_false(
                Type::Ready,
                Reason::Deleting,
                "freeing the firewall machine",
            );
            match owned.first() {
                Some(id) => Decision::new(Step::Free(id.clone()), status, Requeue::Now),
                None => Decision::new(Step::RemoveFinalizer, status, Requeue::AwaitChange),
            }
        }
        Phase::Live(live) => decide_live(fw, live, status),
    }
}

fn decide_live(
    fw: &MetalStackFirewall,
    live: &Live,
    mut status: MetalStackFirewallStatus,
) -> FirewallDecision {
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    let Some(msc) = &live.infrastructure else {
        conditions.set_false(
            Type::Ready,
            Reason::WaitingForCluster,
            "waiting for the MetalStackCluster this firewall belongs to (owner reference or cluster-name label)",
        );
        return Decision::new(Step::Nothing, status, Requeue::After(ABSENT));
    };
    if record_pause(&mut conditions, fw, live.cluster.as_ref()) {
        return Decision::new(Step::Nothing, status, Requeue::AwaitChange);
    }
    let Some(network) = &live.network else {
        let message = format!(
            "waiting for MetalStackCluster {} to have its private network",
            msc.name_any()
        );
        conditions.set_false(Type::Ready, Reason::WaitingForNetwork, message);
        return Decision::new(Step::Nothing, status, Requeue::Poll);
    };
    if !fw.finalizers().iter().any(|f| f == FINALIZER) {
        return Decision::new(Step::AddFinalizer, status, Requeue::AwaitChange);
    }
    let Some(found) = &live.found else {
        return Decision::new(Step::Nothing, status, Requeue::Poll);
    };
    let target = target(fw, msc);
    let problem = target.as_ref().err().cloned();
    if let Some(problem) = problem.or_else(|| found.preset_problem()) {
        let error = Error::Invalid(problem);
        return Decision::failed(Step::Nothing, after_failure(fw, status, &error), error);
    }
    match found {
        Found::Ours(m) => allocated(fw, msc, m, status),
        Found::Lost(lost) => {
            let message = lost.message(
                "delete this MetalStackFirewall; the MetalStackCluster that created it creates a new one",
            );
            status.ready = false;
            let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
            conditions.set_false(
                Type::FirewallAllocated,
                Reason::MachineLost,
                message.clone(),
            );
            conditions.set_false(Type::Ready, Reason::MachineLost, message);
            Decision::new(Step::Nothing, status, Requeue::Resync)
        }
        _ => {
            let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
            let message = format!("allocating a firewall of size {}", fw.spec.machine_type);
            conditions.set_false(Type::FirewallAllocated, Reason::Allocating, message.clone());
            conditions.set_false(Type::Ready, Reason::Allocating, message);
            let request = request(fw, msc, network, target.ok().and_then(|t| t.preset));
            Decision::new(Step::Allocate(Box::new(request)), status, Requeue::Now)
        }
    }
}

/// The status of an allocated firewall. Unlike a machine, a firewall is ready only while it is
/// healthy: its cluster's FirewallReady follows it.
fn allocated(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
    m: &Machine,
    mut status: MetalStackFirewallStatus,
) -> FirewallDecision {
    status.machine_id = Some(m.id.clone());
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    let message = format!("firewall machine {}", m.id);
    conditions.set_true(Type::FirewallAllocated, Reason::Allocated, message);
    let health = Health::of(m);
    let (healthy, reason, message) = health.condition();
    conditions.set_to(healthy, Type::FirewallHealthy, reason, message.clone());
    let ready = health == Health::Ready;
    let next = if ready {
        let message = format!("firewall {} has phoned home", m.id);
        conditions.set_true(Type::Ready, Reason::PhonedHome, message);
        Requeue::Resync
    } else {
        conditions.set_false(Type::Ready, reason, message);
        // The cluster's machines wait for this firewall: looked at sooner than a machine.
        match health.requeue() {
            Requeue::Booting => Requeue::BootingGate,
            other => other,
        }
    };
    status.ready = ready;
    // Name the machine in spec.providerID, as MetalStackMachines do (a preset one is kept).
    let step = match &fw.spec.provider_id {
        Some(_) => Step::Nothing,
        None => Step::Record(serde_json::json!({
            "spec": {"providerID": ProviderId::format(&msc.spec.partition, &m.id)}
        })),
    };
    Decision::new(step, status, next)
}

/// The status after a failed step or an unusable spec.
pub fn after_failure(
    fw: &MetalStackFirewall,
    mut status: MetalStackFirewallStatus,
    error: &Error,
) -> MetalStackFirewallStatus {
    status.ready = false;
    let reason = Reason::Failed(error.category());
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    conditions.set_false(Type::FirewallAllocated, reason, error.to_string());
    conditions.set_false(Type::Ready, reason, error.to_string());
    status
}

/// The firewall allocation: the cluster's private and public networks plus the spec's, the
/// rules, and the tags that find it again.
fn request(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
    network: &str,
    preset: Option<String>,
) -> FirewallCreateRequest {
    let ns = fw.namespace().unwrap_or_default();
    let name = fw.name_any();
    let mut tags = owner_tags(&owner_marks_of(OwnerKind::Firewall, fw));
    tags.push(format!(
        "{CLUSTER_ID_KEY}={}",
        cluster_id(&ns, &msc.name_any())
    ));
    tags.push("firewall.metal-stack.io/managed-by=capms".into());
    let mut ids = vec![network.to_owned(), msc.spec.public_network_id.clone()];
    for extra in &fw.spec.networks {
        if !ids.contains(extra) {
            ids.push(extra.clone());
        }
    }
    let networks = ids
        .into_iter()
        .map(|networkid| AllocationNetwork {
            networkid,
            autoacquire: Some(true),
        })
        .collect();
    FirewallCreateRequest {
        machine: MachineAllocateRequest {
            uuid: preset,
            name: name.clone(),
            description: format!(
                "firewall of cluster {ns}/{}, allocated by capms",
                msc.name_any()
            ),
            hostname: name,
            projectid: msc.spec.project_id.clone(),
            partitionid: msc.spec.partition.clone(),
            sizeid: fw.spec.machine_type.clone(),
            imageid: fw.spec.image.clone(),
            networks: Some(networks),
            ssh_pub_keys: fw.spec.ssh_keys.clone(),
            tags,
            ..Default::default()
        },
        firewall_rules: fw.spec.rules.as_ref().map(rules),
    }
}

/// The spec's rules as metal-api takes them.
fn rules(r: &crate::api::FirewallRules) -> FirewallRules {
    let proto = |p: Option<Protocol>| match p.unwrap_or_default() {
        Protocol::Tcp => "tcp".to_owned(),
        Protocol::Udp => "udp".to_owned(),
    };
    FirewallRules {
        egress: r
            .egress
            .iter()
            .map(|e| FirewallEgressRule {
                protocol: proto(e.protocol),
                ports: e.ports.clone(),
                to: e.to.clone(),
                comment: e.comment.clone().unwrap_or_default(),
            })
            .collect(),
        ingress: r
            .ingress
            .iter()
            .map(|i| FirewallIngressRule {
                protocol: proto(i.protocol),
                ports: i.ports.clone(),
                from: i.from.clone(),
                to: i.to.clone(),
                comment: i.comment.clone().unwrap_or_default(),
            })
            .collect(),
    }
}
