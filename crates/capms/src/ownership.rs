//! Ownership: the marks capms puts on everything it allocates in metal-api, so that every
//! reconcile finds its allocations again (and frees only its own), shared by the controllers
//! and the webhooks.

use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};

/// Prefix of capms' finalizers, labels and metal-api tags.
pub const DOMAIN: &str = "metal-stack.infrastructure.cluster.x-k8s.io";
/// metal-lib's cluster id tag/label key.
pub const CLUSTER_ID: &str = "cluster.metal-stack.io/id";

/// The kind of object an allocation in metal-api belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OwnerKind {
    Cluster,
    Machine,
    Firewall,
}

impl OwnerKind {
    fn word(self) -> &'static str {
        match self {
            OwnerKind::Cluster => "cluster",
            OwnerKind::Machine => "machine",
            OwnerKind::Firewall => "firewall",
        }
    }
}

/// Label on a MetalStackFirewall made for one of the Go provider's MetalStackFirewallDeployments:
/// the deployment's name.
pub const FIREWALL_DEPLOYMENT_LABEL: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/firewall-deployment";

/// Annotation on a MetalStackFirewall rolled in for a changed firewall spec. Of a firewall
/// deployment's firewalls, only the first carries the deployment's mark in metal-api: two
/// firewalls with one mark would each take the other's machine for its own.
pub(crate) const ROLLED_IN_ANNOTATION: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/rolled-in";

/// Label on a cluster's MetalStackFirewalls: `Serving` on the ready one the cluster uses,
/// `RollingIn` on one on its way beside a serving one, `Provisioning` on one on its way while
/// none serves (the cluster's first, or the one rolling in when the serving one was lost). Set
/// on the firewall with the current spec only: one being replaced keeps its label until it is
/// deleted. `kubectl get metalstackfirewalls` shows it as the Role column.
pub(crate) const FIREWALL_ROLE_LABEL: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/firewall-role";

/// The Go provider's `firewall.metal-stack.io/managed-by` value: on the firewalls of its
/// firewall deployments, which capms writes too, so that its users' filters still find them.
pub(crate) const GO_PROVIDER_MANAGER: &str = "cluster-api-provider-metal-stack";

/// What finds a firewall's machine again: for the first one made for a firewall deployment, the
/// Go provider's `firewall-deployment-resource=<namespace>.<deployment>` tag (so that the
/// firewall the Go provider allocated for it is taken over); for any other, [`identity_of`].
pub(crate) fn firewall_identity<K: Resource>(fw: &K) -> BTreeMap<String, String> {
    let rolled_in = fw.annotations().contains_key(ROLLED_IN_ANNOTATION);
    match fw.labels().get(FIREWALL_DEPLOYMENT_LABEL) {
        Some(deployment) if !rolled_in => [(
            format!("{DOMAIN}/firewall-deployment-resource"),
            cluster_id(&fw.namespace().unwrap_or_default(), deployment),
        )]
        .into(),
        _ => identity_of(OwnerKind::Firewall, fw),
    }
}

/// Owner marks put on everything capms allocates in metal-api: `<ns>.<name>` and the UID of the
/// Kubernetes object. Every reconcile looks for them before allocating, so a lost status write
/// never leads to a second allocation.
pub fn owner_marks(
    kind: OwnerKind,
    namespace: &str,
    name: &str,
    uid: &str,
) -> BTreeMap<String, String> {
    [
        (
            format!("{DOMAIN}/{}-resource", kind.word()),
            format!("{namespace}.{name}"),
        ),
        (format!("{DOMAIN}/{}-uid", kind.word()), uid.to_owned()),
    ]
    .into()
}

/// What finds an object's allocations again: the `<kind>-resource=<namespace>.<name>` mark alone.
/// It survives clusterctl move and a restore from backup, which re-create the object with a new
/// UID and no status, so the moved or restored object adopts what it had. A deleted object
/// frees its allocations before it goes (its finalizer), so a new object of the same name finds
/// nothing; only a deletion capms must keep its hands off (paused, or clusterctl's
/// delete-for-move) leaves them, for the copy that lives on. The UID mark stays on every
/// allocation as provenance.
pub fn identity_of<K: Resource>(kind: OwnerKind, obj: &K) -> BTreeMap<String, String> {
    identity(kind, &obj.namespace().unwrap_or_default(), &obj.name_any())
}

/// [`identity_of`] the object of `kind` named `namespace/name`.
pub fn identity(kind: OwnerKind, namespace: &str, name: &str) -> BTreeMap<String, String> {
    let mut marks = owner_marks(kind, namespace, name, "");
    marks.retain(|k, _| k.ends_with("-resource"));
    marks
}

/// The owner marks of `obj`: what capms writes on its allocations.
pub fn owner_marks_of<K: Resource>(kind: OwnerKind, obj: &K) -> BTreeMap<String, String> {
    owner_marks(
        kind,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
        &obj.uid().unwrap_or_default(),
    )
}

/// The owner marks as metal-api tags (`key=value`).
pub fn owner_tags(marks: &BTreeMap<String, String>) -> Vec<String> {
    marks.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Does a tag list carry every owner mark?
pub(crate) fn has_owner_tags(tags: &[String], marks: &BTreeMap<String, String>) -> bool {
    owner_tags(marks).iter().all(|t| tags.contains(t))
}

/// The object an allocation in metal-api belongs to, read back from its tags: the inverse of
/// [`owner_marks`]' `<kind>-resource=<namespace>.<name>` mark (a namespace has no dot, so the
/// first dot ends it). A machine or firewall mark wins over a cluster mark, which the Go
/// provider puts on its machines too.
pub(crate) fn owner_of(tags: &[String]) -> Option<(OwnerKind, String, String)> {
    let prefix = format!("{DOMAIN}/");
    [OwnerKind::Machine, OwnerKind::Firewall, OwnerKind::Cluster]
        .into_iter()
        .find_map(|kind| {
            tags.iter().find_map(|tag| {
                let (key, value) = tag.strip_prefix(&prefix)?.split_once('=')?;
                (key.strip_suffix("-resource") == Some(kind.word())).then_some(())?;
                let (namespace, name) = value.split_once('.')?;
                Some((kind, namespace.to_owned(), name.to_owned()))
            })
        })
}

/// The object an allocation belongs to, when capms made it: besides its `<kind>-resource` mark
/// it carries the `<kind>-uid` mark only capms writes (metal-stack's Go provider marks its
/// allocations by name alone, and they are not capms's to free on its own).
pub(crate) fn allocated_by_capms(tags: &[String]) -> Option<(OwnerKind, String, String)> {
    let (kind, namespace, name) = owner_of(tags)?;
    let uid = format!("{DOMAIN}/{}-uid=", kind.word());
    tags.iter()
        .any(|t| t.starts_with(&uid))
        .then_some((kind, namespace, name))
}

/// `<ns>.<name>`, the cluster id capms uses in metal-stack tags and labels.
pub fn cluster_id(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The tag marking what metal-stack holds for the cluster `name` in `namespace`:
/// `cluster.metal-stack.io/id=<ns>.<name>`.
pub fn cluster_tag(namespace: &str, name: &str) -> String {
    format!("{CLUSTER_ID}={}", cluster_id(namespace, name))
}

/// The prefix of the annotation on a MetalStackCluster recording a retired machine: one capms
/// left allocated, out of the pool, when it gave its Machine up (a remediation's `onExhaustion:
/// Retire`). The machine's ID follows the prefix; the value says why. Machines so recorded are
/// freed neither with their MetalStackMachine nor by the orphan sweep, only with the cluster,
/// or by the sweep once an operator deleted the annotation.
pub(crate) const RETIRED_PREFIX: &str = "retired.metal-stack.infrastructure.cluster.x-k8s.io/";

/// The annotation recording machine `id` retired, when the ID can be an annotation's name
/// (metal-stack's machine IDs are UUIDs: up to 63 letters, digits, `-`, `_` and `.`).
pub fn retired_annotation(id: &str) -> Option<String> {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid = id.len() <= 63
        && id.chars().all(inner)
        && ends(id.chars().next())
        && ends(id.chars().last());
    valid.then(|| format!("{RETIRED_PREFIX}{id}"))
}

/// The machines a MetalStackCluster's annotations record as retired.
pub fn retired_machines<K: Resource>(cluster: &K) -> BTreeSet<String> {
    cluster
        .annotations()
        .keys()
        .filter_map(|k| k.strip_prefix(RETIRED_PREFIX))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_machine_is_recorded_by_its_id_and_found_again() {
        let id = "00000000-0000-0000-0000-ac1f6b7a8f28";
        let key = retired_annotation(id).expect("a UUID names an annotation");
        let mut msc = crate::api::MetalStackCluster::new("c", Default::default());
        msc.annotations_mut().insert(key, "why".into());
        msc.annotations_mut()
            .insert(format!("{DOMAIN}/other"), String::new());
        assert_eq!(retired_machines(&msc), [id.to_owned()].into());
        for unfit in ["", "-a", "a-", "a/b", &"x".repeat(64)] {
            assert_eq!(retired_annotation(unfit), None, "{unfit:?}");
        }
    }

    #[test]
    fn only_an_allocation_with_capms_uid_mark_is_capms_s_own() {
        let tags = owner_tags(&owner_marks(OwnerKind::Machine, "ns", "m1", "uid-1"));
        assert_eq!(
            allocated_by_capms(&tags),
            Some((OwnerKind::Machine, "ns".into(), "m1".into()))
        );
        let by_name = owner_tags(&owner_marks(OwnerKind::Machine, "ns", "m1", "uid-1"));
        let by_name: Vec<String> = by_name
            .into_iter()
            .filter(|t| !t.contains("-uid="))
            .collect();
        assert_eq!(allocated_by_capms(&by_name), None, "the Go provider's");
        assert_eq!(allocated_by_capms(&[]), None);
    }

    #[test]
    fn owner_marks_name_the_object_and_its_uid() {
        let marks = owner_marks(OwnerKind::Machine, "ns", "m1", "uid-1");
        let tags = owner_tags(&marks);
        assert_eq!(
            tags,
            [
                "metal-stack.infrastructure.cluster.x-k8s.io/machine-resource=ns.m1",
                "metal-stack.infrastructure.cluster.x-k8s.io/machine-uid=uid-1"
            ]
        );
        assert!(has_owner_tags(
            &[tags[1].clone(), tags[0].clone(), "x".into()],
            &marks
        ));
        assert!(!has_owner_tags(&tags[..1], &marks));
        let mut moved = k8s_openapi::api::core::v1::ConfigMap::default();
        moved.metadata.namespace = Some("ns".into());
        moved.metadata.name = Some("m1".into());
        moved.metadata.uid = Some("uid-after-move".into());
        let identity = identity_of(OwnerKind::Machine, &moved);
        assert!(
            has_owner_tags(&tags, &identity),
            "a moved object finds its allocation"
        );
        let mut on_machine = vec!["cluster.metal-stack.io/id=ns.c".to_owned()];
        on_machine.extend(owner_tags(&owner_marks(
            OwnerKind::Firewall,
            "ns",
            "c.fw",
            "u",
        )));
        assert_eq!(
            owner_of(&on_machine),
            Some((OwnerKind::Firewall, "ns".into(), "c.fw".into())),
            "a dotted name after the namespace"
        );
        assert_eq!(
            owner_of(&tags[1..]),
            None,
            "the uid mark alone names no object"
        );
    }

    #[test]
    fn only_a_deployment_s_first_firewall_carries_its_mark() {
        let mut fw = k8s_openapi::api::core::v1::ConfigMap::default();
        fw.metadata.namespace = Some("ns".into());
        fw.metadata.name = Some("c-firewall".into());
        fw.metadata.labels = Some([(FIREWALL_DEPLOYMENT_LABEL.to_owned(), "d".to_owned())].into());
        let first = owner_tags(&firewall_identity(&fw));
        assert_eq!(
            first,
            ["metal-stack.infrastructure.cluster.x-k8s.io/firewall-deployment-resource=ns.d"]
        );
        fw.metadata.name = Some("c-firewall-0a1b2c3d".into());
        fw.metadata.annotations =
            Some([(ROLLED_IN_ANNOTATION.to_owned(), "true".to_owned())].into());
        let rolled = owner_tags(&firewall_identity(&fw));
        assert_eq!(
            rolled,
            [
                "metal-stack.infrastructure.cluster.x-k8s.io/firewall-resource=ns.c-firewall-0a1b2c3d"
            ]
        );
    }
}
