//! A template's status from its size and image, without I/O: the least a machine of the size
//! has, its architecture and operating system, or the condition saying why capms cannot tell.

use super::{Observed, Seen, TemplateDecision, TemplateStep};
use crate::api::templates::{Architecture, OperatingSystem};
use crate::api::{MetalStackMachineTemplate, MetalStackMachineTemplateStatus, NodeInfo};
use crate::reconciler::conditions::{Conditions, Reason, Type};
use crate::reconciler::{Decision, Error, Phase, Requeue};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use metal_api::types::Size;
use std::collections::BTreeMap;
use strum::VariantNames;

/// The resource a size's GPUs are scheduled as.
pub(crate) const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The size label that names an architecture other than metal-stack's usual amd64.
pub(crate) const ARCHITECTURE_LABEL: &str = "kubernetes.io/arch";

/// Why capms cannot tell what a node made from the template would have.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NodeUnknown {
    #[error("spec.template.spec.machineType: size {size:?} is not in metal-api; valid: {valid}")]
    UnknownSize { size: String, valid: String },
    #[error(
        "spec.template.spec.image: {image:?} resolves to no machine image in metal-api; valid: {valid}"
    )]
    UnknownImage { image: String, valid: String },
    #[error(
        "size {size} states no minimum {constraint} in its constraints: the capacity of its machines is unknown, so the cluster-autoscaler cannot scale this template up from zero; give the size a minimum, or set the capacity.cluster-autoscaler.kubernetes.io annotations on the MachineDeployment"
    )]
    NoMinimum {
        size: String,
        constraint: &'static str,
    },
    #[error(
        "size {size}: label {ARCHITECTURE_LABEL}={value:?} is no architecture Cluster API knows; valid: {valid}"
    )]
    UnknownArchitecture {
        size: String,
        value: String,
        valid: String,
    },
}

impl NodeUnknown {
    fn reason(&self) -> Reason {
        match self {
            NodeUnknown::UnknownSize { .. } => Reason::UnknownSize,
            NodeUnknown::UnknownImage { .. } => Reason::UnknownImage,
            NodeUnknown::NoMinimum { .. } => Reason::SizeWithoutMinimum,
            NodeUnknown::UnknownArchitecture { .. } => Reason::UnknownArchitecture,
        }
    }
}

pub(super) fn decide(
    template: &MetalStackMachineTemplate,
    observed: &Observed,
) -> TemplateDecision {
    let mut status = template.status.clone().unwrap_or_default();
    let seen = match observed.phase() {
        Phase::Live(seen) => seen,
        Phase::Idle(next) => return Decision::new(TemplateStep::Nothing, status, next),
        Phase::Teardown(()) => {
            return Decision::new(TemplateStep::Nothing, status, Requeue::AwaitChange);
        }
    };
    let mut conditions = Conditions::of(&mut status.conditions, template.metadata.generation);
    match node_of(template, seen) {
        Ok((capacity, node_info, image)) => {
            let message = format!(
                "from size {} ({}) and image {image}",
                template.spec.template.spec.machine_type,
                describe(&capacity)
            );
            conditions.set_true(Type::CapacityKnown, Reason::CapacityKnown, message);
            status.capacity = capacity;
            status.node_info = Some(node_info);
        }
        Err(unknown) => {
            conditions.set_false(Type::CapacityKnown, unknown.reason(), unknown.to_string());
            status.capacity.clear();
            status.node_info = None;
        }
    }
    // A catalog refresh that changes a size or an image wakes every template; the periodic
    // look is a safety net.
    Decision::new(TemplateStep::Nothing, status, Requeue::Resync)
}

/// A reconcile that could not read metal-api: the capacity stays as last read, and the
/// condition says it may be stale.
pub(super) fn report_failure(
    status: &mut MetalStackMachineTemplateStatus,
    generation: Option<i64>,
    error: &Error,
) {
    Conditions::of(&mut status.conditions, generation).set_false(
        Type::CapacityKnown,
        Reason::Failed(error.category()),
        format!("reading the size and image from metal-api failed: {error}"),
    );
}

type Capacity = BTreeMap<String, Quantity>;

/// The capacity, the node info and the image id of a node made from the template.
fn node_of(
    template: &MetalStackMachineTemplate,
    seen: &Seen,
) -> Result<(Capacity, NodeInfo, String), NodeUnknown> {
    let spec = &template.spec.template.spec;
    let size = seen
        .size
        .as_ref()
        .map_err(|valid| NodeUnknown::UnknownSize {
            size: spec.machine_type.clone(),
            valid: crate::choices(valid),
        })?;
    let image = seen
        .image
        .as_ref()
        .map_err(|valid| NodeUnknown::UnknownImage {
            image: spec.image.clone(),
            valid: crate::choices(valid),
        })?;
    let node_info = NodeInfo {
        architecture: architecture(size)?,
        // metal-stack's machine images are Linux distributions, Windows it does not install.
        operating_system: OperatingSystem::Linux,
    };
    Ok((capacity(size)?, node_info, image.id.clone()))
}

/// The least each machine of `size` has: the sum of the minimums of its constraints of a type.
fn capacity(size: &Size) -> Result<Capacity, NodeUnknown> {
    let least = |type_: &str| -> u64 {
        let of_type = size.constraints.iter().filter(|c| c.type_ == type_);
        of_type.map(|c| c.min).sum()
    };
    let required = |constraint: &'static str| match least(constraint) {
        0 => Err(NodeUnknown::NoMinimum {
            size: size.id.clone(),
            constraint,
        }),
        n => Ok(n),
    };
    let mut capacity = Capacity::new();
    capacity.insert("cpu".into(), Quantity(required("cores")?.to_string()));
    capacity.insert("memory".into(), bytes(required("memory")?));
    if let storage @ 1.. = least("storage") {
        capacity.insert("ephemeral-storage".into(), bytes(storage));
    }
    if let gpus @ 1.. = least("gpu") {
        capacity.insert(GPU_RESOURCE.into(), Quantity(gpus.to_string()));
    }
    Ok(capacity)
}

/// The size's architecture label, or amd64: metal-api's sizes and images state none, and
/// metal-stack's machines are x86-64.
fn architecture(size: &Size) -> Result<Architecture, NodeUnknown> {
    match size.labels.get(ARCHITECTURE_LABEL) {
        None => Ok(Architecture::Amd64),
        Some(value) => value.parse().map_err(|_| NodeUnknown::UnknownArchitecture {
            size: size.id.clone(),
            value: value.clone(),
            valid: Architecture::VARIANTS.join(", "),
        }),
    }
}

/// `n` bytes in the largest binary or decimal unit that states them exactly.
fn bytes(n: u64) -> Quantity {
    const UNITS: [(u64, &str); 6] = [
        (1 << 40, "Ti"),
        (1_000_000_000_000, "T"),
        (1 << 30, "Gi"),
        (1_000_000_000, "G"),
        (1 << 20, "Mi"),
        (1_000_000, "M"),
    ];
    let exact = UNITS.iter().find(|(unit, _)| n.is_multiple_of(*unit));
    Quantity(match exact {
        Some((unit, suffix)) => format!("{}{suffix}", n / unit),
        None => n.to_string(),
    })
}

/// `cpu=4, memory=16Gi, …` for the condition's message.
fn describe(capacity: &Capacity) -> String {
    let each = capacity.iter().map(|(k, v)| format!("{k}={}", v.0));
    each.collect::<Vec<_>>().join(", ")
}
