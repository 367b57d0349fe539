//! What a MetalStackCluster reconcile observes and the steps it can take.

use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    ApiEndpoint, MetalStackClusterStatus, MetalStackFirewall, MetalStackFirewallTemplate,
};
use crate::reconciler::Decision;
use metal_api::types::{IpAllocateRequest, NetworkAllocateRequest};

/// What observe read. Deleting carries what is left to tear down.
pub type Observed = crate::reconciler::Observed<ClusterGate, Box<Left>>;

/// The gates a live MetalStackCluster passes before capms provisions it. `observe` walks them
/// in this order, reads nothing past the first closed one, and is the one place the order is
/// stated: `decide` reports a closed gate and never checks one again.
#[derive(Debug)]
pub enum ClusterGate {
    /// No owner reference to a Cluster: Cluster API has not taken the object up yet.
    NoOwner,
    /// The owning Cluster `owner` is not there (yet).
    NoCluster { owner: String },
    /// Reconciliation is paused, by the Cluster or by the object's own annotation: why.
    Paused(String),
    /// capms's finalizer is not on the object yet.
    NotTakenUp,
    /// Every gate is open: the provisioning stages as far as they were read.
    Open(Box<Stages>),
}

/// The provisioning stages of an open cluster, in the order decide takes them; a later stage is
/// None while an earlier one is under way.
#[derive(Debug, Default)]
pub struct Stages {
    /// The owning Cluster's name.
    pub owner: String,
    pub network: Option<NetworkSeen>,
    pub endpoint: Option<EndpointSeen>,
    pub firewall: Option<FirewallSeen>,
    /// The racks to report as failure domains; None when metal-api's machines could not be read
    /// in time.
    pub failure_domains: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum NetworkSeen {
    /// spec.privateNetworkID exists in metal-api. `ours` when it carries this cluster's id
    /// label, as a provider's allocation for the cluster does (the Go provider's, taken over):
    /// freed with the cluster then.
    Given { ours: bool },
    /// spec.privateNetworkID does not exist; the message's valid choices.
    GivenMissing { choices: String },
    /// The network capms allocated: recorded in status or found by its owner labels.
    Allocated(String),
    /// None allocated yet.
    Unallocated,
}

/// The control-plane IP as metal-api has it.
#[derive(Clone, Debug, PartialEq)]
pub enum EndpointSeen {
    /// No host given: the public network, and the IP capms allocated there (found by its owner
    /// tags), if any.
    Allocated { network: String, ip: Option<String> },
    /// The given host is the IP capms reserved earlier (recorded in status).
    Recorded,
    /// The given host is a name, lies outside the public network or is someone else's IP, or
    /// spec.controlPlaneIP names the IP: used as given.
    AsGiven,
    /// The given host is an IP of the public network that capms holds.
    Reserved(String),
    /// The given host is a free IP of the public network `network`: capms reserves it.
    Free { network: String },
    /// The public network cannot be used: what is wrong, with the valid choices.
    PublicNetworkUnusable(String),
}

/// What observe read about the firewall.
#[derive(Debug, Default)]
pub struct FirewallSeen {
    /// The cluster's MetalStackFirewalls (those it is the controller of), being deleted or not.
    pub firewalls: Vec<MetalStackFirewall>,
    /// When they were read: a rolling-in firewall's age is measured against it.
    pub now: jiff::Timestamp,
    /// How long a rolling-in firewall may take to become ready.
    pub rollout_deadline: std::time::Duration,
    /// When spec.firewallDeploymentRef is set: the deployment, or the names of the deployments
    /// the namespace has.
    pub deployment: Option<Result<MetalStackFirewallDeployment, Vec<String>>>,
    /// When spec.firewallTemplateRef is set, or the deployment names a template: the template,
    /// or the names of the templates the namespace has.
    pub template: Option<Result<MetalStackFirewallTemplate, Vec<String>>>,
    /// When the deployment asks for spec.autoUpdate.machineImage: the newest firewall image of
    /// the template image's operating system and minor version in metal-api.
    pub newest_image: Option<String>,
}

/// What observe found still standing.
#[derive(Debug, Default, PartialEq)]
pub struct Left {
    /// MetalStackMachines of the cluster.
    pub machines: usize,
    /// Machines the cluster records as retired, still allocated: (ID, its MetalStackMachine).
    pub retired: Vec<(String, String)>,
    /// The cluster's firewalls (it is their controller), each with whether it is being deleted.
    pub firewalls: Vec<(String, bool)>,
    /// Control-plane IPs that carry the cluster's owner tags.
    pub ips: Vec<String>,
    /// Networks that carry the cluster's owner labels.
    pub networks: Vec<String>,
}

#[derive(Debug, strum::IntoStaticStr, strum::VariantNames)]
pub enum ClusterStep {
    Nothing,
    AddFinalizer,
    AllocateNetwork(Box<NetworkAllocateRequest>),
    AllocateIp(Box<IpAllocateRequest>),
    /// Reserve the given host as a static IP.
    ReserveIp(String, Box<IpAllocateRequest>),
    /// Write spec.controlPlaneEndpoint.
    PatchEndpoint(ApiEndpoint),
    /// Create the cluster's MetalStackFirewall (server-side apply).
    CreateFirewall(Box<MetalStackFirewall>),
    /// Bring the not yet allocated MetalStackFirewall up to date (server-side apply).
    UpdateFirewall(Box<MetalStackFirewall>),
    /// Give the named firewall the labels and annotations the cluster sets (a merge patch; its
    /// spec and machine stay).
    RelabelFirewall {
        name: String,
        labels: std::collections::BTreeMap<String, String>,
        annotations: std::collections::BTreeMap<String, String>,
    },
    /// Create a MetalStackFirewall for the changed firewall spec while the serving one stays.
    RollInFirewall(Box<MetalStackFirewall>),
    /// Delete a MetalStackFirewall of a rollout, for the reason given.
    RetireFirewall(String, Retire),
    DeleteFirewall(String),
    /// Write the firewall's providerID to the named firewall deployment's
    /// spec.managedResourceRef.
    RecordFirewallOnDeployment(String, String),
    /// Make the named firewall deployment the cluster's: these owner references (the cluster as
    /// controller) and labels.
    ClaimDeployment {
        name: String,
        owners: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
        labels: std::collections::BTreeMap<String, String>,
    },
    FreeIp(String),
    FreeNetwork(String),
    /// Free a retired machine (its ID and the MetalStackMachine it was allocated for).
    FreeRetired(String, String),
    RemoveFinalizer,
}

/// Why a firewall of a rollout goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Retire {
    /// The firewall of the current spec is ready and replaces it.
    Replaced,
    /// It was rolling in for a spec that changed again.
    Superseded,
    /// It did not become ready within the deadline: why.
    Failed(String),
}

pub(crate) type ClusterDecision = Decision<ClusterStep, MetalStackClusterStatus>;
