//! MetalStackRemediationTemplate and MetalStackRemediation: Cluster API's external remediation
//! of a MachineHealthCheck, carried out on the same metal-stack machine (a power cycle or a
//! reinstall) before the Machine is handed back for replacement.

use super::common::conditions_schema;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The attempts of a remediation before its Machine is given up, when the template leaves it
/// out.
pub(crate) const DEFAULT_RETRY_LIMIT: i32 = 1;
/// The most attempts a remediation may make: beyond this a node that keeps hanging is better
/// replaced.
pub(crate) const MAX_RETRY_LIMIT: i32 = 10;
/// How long capms waits for the node after an attempt, when the template leaves it out.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: i64 = 600;
/// The shortest wait for a node after an attempt: a bare-metal reboot takes minutes.
pub(crate) const MIN_TIMEOUT_SECONDS: i64 = 100;
/// The longest wait for a node after an attempt (a day).
pub(crate) const MAX_TIMEOUT_SECONDS: i64 = 86_400;
/// The longest cooldown (30 days).
pub(crate) const MAX_COOLDOWN_SECONDS: i64 = 2_592_000;

/// Desired state of a MetalStackRemediation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackRemediation",
    namespaced,
    status = "MetalStackRemediationStatus",
    shortname = "msr",
    category = "cluster-api",
    doc = "MetalStackRemediation is a MachineHealthCheck's request to remediate one unhealthy Machine (it carries the Machine's name and is owned by it): capms power-cycles or reinstalls the Machine's metal-stack machine and waits for its node, up to the strategy's retry limit, then hands the Machine back for replacement.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster the Machine belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "The node is back"
    ),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.strategy.type",
        description = "Reboot (power cycle) or Reinstall"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Running, Waiting, Succeeded or Exhausted"
    ),
    printcolumn(
        name = "Retries",
        type_ = "integer",
        json_path = ".status.retryCount",
        description = "Attempts made"
    ),
    printcolumn(
        name = "Last remediated",
        type_ = "date",
        json_path = ".status.lastRemediated",
        description = "When the last attempt began"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".status.machineID",
        description = "metal-stack machine",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackRemediationSpec {
    /// How the machine is remediated. Defaults to one power cycle, waiting 600 seconds for the
    /// node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RemediationStrategy>,
}

/// How capms remediates an unhealthy Machine, and what happens when that does not help.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    /// Reboot power-cycles the machine through its BMC; Reinstall installs the machine again
    /// with the same image and bootstrap data, keeping its allocation. Defaults to Reboot.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<RemediationType>,
    /// Attempts before the Machine is given up (1 to 10). Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_RETRY_LIMIT))]
    pub retry_limit: Option<i32>,
    /// How long to wait for the node to be Ready again after each attempt (100 to 86400).
    /// Defaults to 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_TIMEOUT_SECONDS, max = MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// A Machine remediated successfully less than this many seconds ago is not remediated
    /// again but handed back for replacement at once: a node that keeps hanging is replaced.
    /// 0 (the default) disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_COOLDOWN_SECONDS))]
    pub cooldown_seconds: Option<i64>,
    /// What becomes of the metal-stack machine once capms gives its Machine up (after the last
    /// attempt, or within the cooldown). Reuse (the default): freed as usual when the Machine is
    /// deleted, back to the pool once metal-stack has wiped it. Retire: left allocated in the
    /// project, out of the pool, and recorded on the MetalStackCluster as the annotation
    /// `retired.metal-stack.infrastructure.cluster.x-k8s.io/<machine ID>`; deleting that
    /// annotation frees it (after the orphan sweep's grace), and deleting the cluster frees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exhaustion: Option<ExhaustionPolicy>,
}

/// What becomes of a machine whose Machine capms gave up.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ExhaustionPolicy {
    /// Freed with its Machine, as any machine is.
    #[default]
    Reuse,
    /// Kept allocated and out of the pool until an operator has looked at it.
    Retire,
}

/// The remediation a strategy takes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RemediationType {
    /// A power cycle through the machine's BMC.
    #[default]
    Reboot,
    /// The same image and bootstrap data installed again on the same machine.
    Reinstall,
}

impl RemediationStrategy {
    pub fn kind(&self) -> RemediationType {
        self.type_.unwrap_or_default()
    }

    pub(crate) fn retry_limit(&self) -> i32 {
        self.retry_limit.unwrap_or(DEFAULT_RETRY_LIMIT)
    }

    pub fn timeout(&self) -> std::time::Duration {
        let seconds = self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        std::time::Duration::from_secs(seconds.max(0).unsigned_abs())
    }

    pub(crate) fn on_exhaustion(&self) -> ExhaustionPolicy {
        self.on_exhaustion.unwrap_or_default()
    }

    pub fn cooldown(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.cooldown_seconds.unwrap_or(0).max(0).unsigned_abs())
    }
}

impl MetalStackRemediationSpec {
    /// The strategy, defaults filled in where the spec leaves them out.
    pub fn strategy(&self) -> RemediationStrategy {
        self.strategy.clone().unwrap_or_default()
    }
}

/// Where a remediation stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RemediationPhase {
    /// An attempt was made; capms waits for the node.
    Running,
    /// Nothing can be done yet (see the conditions): the machine is unknown, metal-api refused,
    /// or the control plane cannot spare the machine now.
    Waiting,
    /// The node is back; the MachineHealthCheck deletes this object once it sees it healthy.
    Succeeded,
    /// Every attempt failed (or the cooldown applied): the Machine is handed back for
    /// replacement.
    Exhausted,
}

/// The last power action or reinstall capms asked metal-api for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerActionRecord {
    /// `Cycle` (a power cycle) or `Reinstall`.
    pub action: String,
    /// When capms asked.
    pub time: Time,
    /// Did metal-api accept it?
    pub accepted: bool,
    /// metal-api's answer: `OK`, or its error.
    #[schemars(length(max = 1024))]
    pub answer: String,
}

/// Observed state of a MetalStackRemediation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackRemediationStatus {
    /// Running, Waiting, Succeeded or Exhausted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RemediationPhase>,
    /// Attempts made so far.
    #[serde(default)]
    pub retry_count: i32,
    /// When the last attempt began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediated: Option<Time>,
    /// The newest reboot metal-api showed of the machine when the last attempt began: a newer
    /// one is the attempt's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_reboot: Option<MicroTime>,
    /// The metal-stack machine remediated.
    #[serde(default, rename = "machineID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub machine_id: Option<String>,
    /// The last power action or reinstall, with metal-api's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_power_action: Option<PowerActionRecord>,
    /// Current state: Ready (remediated), MachineFound, Remediating.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Desired state of a MetalStackRemediationTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackRemediationTemplate",
    namespaced,
    shortname = "msrt",
    category = "cluster-api",
    doc = "MetalStackRemediationTemplate is what a MachineHealthCheck names in spec.remediation.templateRef to have capms remediate unhealthy Machines on the same metal-stack machine (a power cycle or a reinstall) before they are replaced.",
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.template.spec.strategy.type",
        description = "Reboot (power cycle) or Reinstall"
    ),
    printcolumn(
        name = "Retry limit",
        type_ = "integer",
        json_path = ".spec.template.spec.strategy.retryLimit"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct MetalStackRemediationTemplateSpec {
    /// The MetalStackRemediation the MachineHealthCheck creates for an unhealthy Machine.
    pub template: MetalStackRemediationTemplateResource,
}

/// A MetalStackRemediation as a template describes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetalStackRemediationTemplateResource {
    /// Spec of the created MetalStackRemediations.
    pub spec: MetalStackRemediationSpec,
}
