use super::decide::{GPU_RESOURCE, decide, report_failure};
use super::*;
use crate::api::templates::{Architecture, OperatingSystem};
use crate::api::{
    MetalStackMachineSpec, MetalStackMachineTemplateResource, MetalStackMachineTemplateSpec,
};
use crate::reconciler::conditions::{Type, find};
use metal_api::types::SizeConstraint;

fn template(size: &str, image: &str) -> MetalStackMachineTemplate {
    let spec = MetalStackMachineSpec {
        machine_type: size.into(),
        image: image.into(),
        ..Default::default()
    };
    let mut t = MetalStackMachineTemplate::new(
        "workers",
        MetalStackMachineTemplateSpec {
            template: MetalStackMachineTemplateResource {
                metadata: None,
                spec,
            },
        },
    );
    t.metadata.generation = Some(3);
    t
}

fn constraint(type_: &str, min: u64, max: u64) -> SizeConstraint {
    SizeConstraint {
        type_: type_.into(),
        min,
        max,
        identifier: String::new(),
    }
}

fn size(constraints: Vec<SizeConstraint>) -> Size {
    Size {
        id: "c1-large-x86".into(),
        constraints,
        ..Default::default()
    }
}

fn image() -> Image {
    Image {
        id: "ubuntu-24.4.20260101".into(),
        features: vec!["machine".into()],
        ..Default::default()
    }
}

fn live(
    size: std::result::Result<Size, Vec<String>>,
    image: std::result::Result<Image, Vec<String>>,
) -> Observed {
    Observed::Live(Box::new(Seen { size, image }))
}

fn capacity_of(d: &TemplateDecision) -> Vec<(String, String)> {
    let each = d.status.capacity.iter();
    each.map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

fn condition(d: &TemplateDecision) -> (String, String, String) {
    let c = find(&d.status.conditions, Type::CapacityKnown).expect("CapacityKnown");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn capacity_is_the_least_a_machine_of_the_size_has() {
    let gpus = SizeConstraint {
        identifier: "AD102GL*".into(),
        ..constraint("gpu", 2, 2)
    };
    let big = size(vec![
        constraint("cores", 32, 64),
        constraint("memory", 256 << 30, 512 << 30),
        constraint("storage", 1_920_000_000_000, 4_000_000_000_000),
        gpus.clone(),
        SizeConstraint {
            identifier: "GA100*".into(),
            ..constraint("gpu", 1, 1)
        },
    ]);
    let d = decide(
        &template("c1-large-x86", "ubuntu-24.4"),
        &live(Ok(big), Ok(image())),
    );
    assert_eq!(d.step, TemplateStep::Nothing);
    assert!(matches!(d.next, Ok(Requeue::Resync)));
    assert_eq!(
        capacity_of(&d),
        pairs(&[
            ("cpu", "32"),
            ("ephemeral-storage", "1920G"),
            ("memory", "256Gi"),
            (GPU_RESOURCE, "3")
        ])
    );
    let node = d.status.node_info.clone().expect("node info");
    assert_eq!(
        (node.architecture, node.operating_system),
        (Architecture::Amd64, OperatingSystem::Linux)
    );
    let (status, reason, message) = condition(&d);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "CapacityKnown")
    );
    assert!(
        message.contains("c1-large-x86") && message.contains("ubuntu-24.4.20260101"),
        "{message}"
    );
    let observed =
        find(&d.status.conditions, Type::CapacityKnown).and_then(|c| c.observed_generation);
    assert_eq!(observed, Some(3));

    // Storage and GPUs only where the size has them; a byte count no unit divides stays bytes.
    let small = size(vec![
        constraint("cores", 1, 4),
        constraint("memory", 500_000_001, 4_000_000_000),
    ]);
    let d = decide(
        &template("c1-large-x86", "ubuntu-24.4"),
        &live(Ok(small), Ok(image())),
    );
    assert_eq!(
        capacity_of(&d),
        pairs(&[("cpu", "1"), ("memory", "500000001")])
    );
}

#[test]
fn a_size_or_image_metal_api_lacks_is_a_condition_naming_the_valid_ones_not_a_guess() {
    let mut known = template("v1-small-x86", "ubuntu-24.4");
    let ok = size(vec![
        constraint("cores", 1, 4),
        constraint("memory", 1 << 30, 4 << 30),
    ]);
    known.status = Some(decide(&known, &live(Ok(ok), Ok(image()))).status);
    assert!(!known.status.as_ref().expect("status").capacity.is_empty());

    let d = decide(
        &known,
        &live(
            Err(vec!["v1-small-x86".into(), "c1-large-x86".into()]),
            Ok(image()),
        ),
    );
    let (status, reason, message) = condition(&d);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "UnknownSize"));
    assert!(
        message.starts_with("spec.template.spec.machineType:"),
        "{message}"
    );
    assert!(
        message.contains("valid: c1-large-x86, v1-small-x86"),
        "{message}"
    );
    assert!(
        d.status.capacity.is_empty() && d.status.node_info.is_none(),
        "no stale capacity"
    );

    let d = decide(
        &known,
        &live(Ok(size(vec![])), Err(vec!["debian-13.0".into()])),
    );
    let (status, reason, message) = condition(&d);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnknownImage")
    );
    assert!(
        message.starts_with("spec.template.spec.image:") && message.contains("valid: debian-13.0"),
        "{message}"
    );
    assert!(d.status.capacity.is_empty() && d.status.node_info.is_none());
}

#[test]
fn a_size_without_a_minimum_of_cores_or_memory_has_no_capacity() {
    for (constraints, missing) in [
        (vec![constraint("memory", 1 << 30, 2 << 30)], "cores"),
        (
            vec![
                constraint("cores", 0, 4),
                constraint("memory", 1 << 30, 2 << 30),
            ],
            "cores",
        ),
        (
            vec![constraint("cores", 2, 4), constraint("memory", 0, 2 << 30)],
            "memory",
        ),
    ] {
        let d = decide(
            &template("c1-large-x86", "ubuntu"),
            &live(Ok(size(constraints)), Ok(image())),
        );
        let (status, reason, message) = condition(&d);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "SizeWithoutMinimum")
        );
        assert!(
            message.contains(&format!("no minimum {missing}")),
            "{message}"
        );
        assert!(d.status.capacity.is_empty() && d.status.node_info.is_none());
    }
}

#[test]
fn the_architecture_is_the_sizes_label_or_amd64() {
    let labelled = |value: &str| {
        let mut s = size(vec![
            constraint("cores", 2, 2),
            constraint("memory", 1 << 30, 1 << 30),
        ]);
        s.labels.insert("kubernetes.io/arch".into(), value.into());
        s
    };
    let d = decide(
        &template("c1-large-x86", "ubuntu"),
        &live(Ok(labelled("arm64")), Ok(image())),
    );
    assert_eq!(
        d.status.node_info.map(|n| n.architecture),
        Some(Architecture::Arm64)
    );

    let d = decide(
        &template("c1-large-x86", "ubuntu"),
        &live(Ok(labelled("riscv64")), Ok(image())),
    );
    let (status, reason, message) = condition(&d);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnknownArchitecture")
    );
    assert!(
        message.contains("\"riscv64\"") && message.contains("amd64, arm64, s390x, ppc64le"),
        "{message}"
    );
    assert!(d.status.node_info.is_none());
}

#[test]
fn a_template_left_alone_keeps_its_status_and_a_failed_read_keeps_the_capacity() {
    let mut t = template("c1-large-x86", "ubuntu");
    let ok = size(vec![
        constraint("cores", 2, 2),
        constraint("memory", 1 << 30, 1 << 30),
    ]);
    t.status = Some(decide(&t, &live(Ok(ok), Ok(image()))).status);
    let d = decide(&t, &Observed::Unmanaged);
    assert_eq!(Some(&d.status), t.status.as_ref());
    assert!(matches!(d.next, Ok(Requeue::AwaitChange)));

    let mut status = t.status.clone().expect("status");
    let error = Error::Invalid("metal-api unreachable".into());
    report_failure(&mut status, Some(3), &error);
    assert_eq!(status.capacity, t.status.as_ref().expect("status").capacity);
    let c = find(&status.conditions, Type::CapacityKnown).expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(c.message.contains("metal-api unreachable"), "{}", c.message);
}
