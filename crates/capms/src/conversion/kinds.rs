//! Per kind, where each field of one schema lives in the other. Every field of both schemas is
//! listed (a test checks the tables against the CRDs): a field missing here would be dropped.

use super::{Schema, conditions};
use serde_json::Value;

/// A value as one schema holds it, turned into what the other holds (None: absent).
type Transform = fn(Option<Value>) -> Option<Value>;

/// One field and where it lives in each schema (None: that schema cannot express it).
#[derive(Debug)]
pub struct Field {
    /// JSON pointer in the Go provider's `v1alpha1`.
    pub go: Option<&'static str>,
    /// JSON pointer in capms's `v1alpha3`/`v1alpha4`.
    pub capms: Option<&'static str>,
    /// Where capms keeps the value the Go provider writes back into this spec field, shown in
    /// `v1alpha1` when the capms field itself is empty.
    pub fallback: Option<&'static str>,
    /// `v1alpha1` value → capms value, when the two differ in form.
    pub up: Option<Transform>,
    /// capms value → `v1alpha1` value.
    pub down: Option<Transform>,
    /// What `v1alpha1` shows for a field only it has, and requires, when the object has no
    /// value for it (it was made in capms's versions); converted back, it is no loss.
    pub unset_in_go: Option<&'static str>,
}

impl Field {
    pub fn path(&self, schema: Schema) -> Option<&'static str> {
        match schema {
            Schema::Capms => self.capms,
            Schema::GoProvider => self.go,
        }
    }

    pub(super) fn transform(
        &self,
        from: Schema,
        to: Schema,
        value: Option<Value>,
    ) -> Option<Value> {
        let transform = match (from, to) {
            (Schema::GoProvider, Schema::Capms) => self.up,
            (Schema::Capms, Schema::GoProvider) => self.down,
            _ => None,
        };
        match transform {
            Some(transform) => transform(value),
            None => value,
        }
    }
}

/// A kind served in both schemas.
#[derive(Debug)]
pub struct ConvertedKind {
    pub name: &'static str,
    /// Its fields, in groups some kinds share.
    pub fields: &'static [&'static [Field]],
    /// Fields `v1alpha1` requires.
    pub go_required: &'static [&'static str],
    /// Fields capms's versions require.
    pub capms_required: &'static [&'static str],
}

impl ConvertedKind {
    pub const ALL: [&'static ConvertedKind; 4] =
        [&CLUSTER, &MACHINE, &MACHINE_TEMPLATE, &FIREWALL_TEMPLATE];

    pub fn named(name: &str) -> Option<&'static ConvertedKind> {
        Self::ALL.into_iter().find(|k| k.name == name)
    }

    /// Every field of the kind.
    pub fn fields(&'static self) -> impl Iterator<Item = &'static Field> {
        self.fields.iter().flat_map(|group| group.iter())
    }

    pub fn required(&self, schema: Schema) -> &'static [&'static str] {
        match schema {
            Schema::Capms => self.capms_required,
            Schema::GoProvider => self.go_required,
        }
    }
}

/// The same field under the same pointer in both schemas.
const fn same(path: &'static str) -> Field {
    moved(path, path)
}

/// A field at `go` in `v1alpha1` and at `capms` in capms's versions, moved as it is.
const fn at(go: Option<&'static str>, capms: Option<&'static str>) -> Field {
    Field {
        go,
        capms,
        fallback: None,
        up: None,
        down: None,
        unset_in_go: None,
    }
}

const fn moved(go: &'static str, capms: &'static str) -> Field {
    at(Some(go), Some(capms))
}

const fn go_only(go: &'static str) -> Field {
    at(Some(go), None)
}

const fn capms_only(capms: &'static str) -> Field {
    at(None, Some(capms))
}

/// The Go provider serializes an unset providerID as `""`; capms leaves it out.
const fn provider_id(go: &'static str, capms: &'static str) -> Field {
    Field {
        up: Some(empty_is_absent),
        ..moved(go, capms)
    }
}

fn empty_is_absent(value: Option<Value>) -> Option<Value> {
    value.filter(|v| v.as_str() != Some(""))
}

/// `v1alpha1` requires a firewall template's networks, which capms's may leave out: shown as
/// none.
fn absent_is_no_list(value: Option<Value>) -> Option<Value> {
    value.or_else(|| Some(Value::Array(Vec::new())))
}

/// No networks in `v1alpha1` is no field in capms's versions.
fn no_list_is_absent(value: Option<Value>) -> Option<Value> {
    value.filter(|v| v.as_array().is_none_or(|a| !a.is_empty()))
}

/// A `v1alpha1` field of the firewall template that capms's versions have no place for and
/// `v1alpha1` requires (capms allocates in the cluster's partition and project): a template
/// made in capms's versions shows it empty.
const fn required_go_only(go: &'static str) -> Field {
    Field {
        unset_in_go: Some(""),
        ..go_only(go)
    }
}

/// `v1alpha1` requires an endpoint's host; capms's endpoint may name only the port of the IP it
/// allocates. Such an endpoint is not shown in `v1alpha1` (it travels in the kept annotation).
fn endpoint_with_host(value: Option<Value>) -> Option<Value> {
    value.filter(|v| {
        v.get("host")
            .and_then(Value::as_str)
            .is_some_and(|h| !h.is_empty())
    })
}

/// The readiness and failure fields of every kind with a status, alike in both schemas.
static SHARED_STATUS: [Field; 4] = [
    same("/status/ready"),
    same("/status/initialization"),
    same("/status/failureReason"),
    same("/status/failureMessage"),
];

/// A machine's spec under `$at`: in a machine and in a machine template.
macro_rules! machine_spec {
    ($at:literal) => {
        [
            same(concat!($at, "/image")),
            moved(concat!($at, "/size"), concat!($at, "/machineType")),
            provider_id(concat!($at, "/providerID"), concat!($at, "/providerID")),
            capms_only(concat!($at, "/partition")),
            capms_only(concat!($at, "/sshKeys")),
            capms_only(concat!($at, "/tags")),
        ]
    };
}

pub static CLUSTER: ConvertedKind = ConvertedKind {
    name: "MetalStackCluster",
    fields: &[
        &SHARED_STATUS,
        &[
            Field {
                up: Some(conditions::cluster_from_go),
                down: Some(conditions::cluster_shown_in_go),
                ..same("/status/conditions")
            },
            Field {
                down: Some(endpoint_with_host),
                ..same("/spec/controlPlaneEndpoint")
            },
            same("/spec/partition"),
            same("/spec/projectID"),
            Field {
                fallback: Some("/status/networkID"),
                ..moved("/spec/nodeNetworkID", "/spec/privateNetworkID")
            },
            same("/spec/controlPlaneIP"),
            same("/spec/firewallDeploymentRef"),
            capms_only("/spec/publicNetworkID"),
            capms_only("/spec/firewallSpec"),
            capms_only("/spec/firewallTemplateRef"),
            capms_only("/spec/credentialsRef"),
            capms_only("/status/networkID"),
            capms_only("/status/allocatedNetworkID"),
            capms_only("/status/allocatedControlPlaneIP"),
            capms_only("/status/firewall"),
            capms_only("/status/failureDomains"),
        ],
    ],
    go_required: &["/spec/partition", "/spec/projectID"],
    capms_required: &["/spec/partition", "/spec/projectID"],
};

pub(crate) static MACHINE: ConvertedKind = ConvertedKind {
    name: "MetalStackMachine",
    fields: &[
        &SHARED_STATUS,
        &machine_spec!("/spec"),
        &[
            same("/status/addresses"),
            capms_only("/status/failureDomain"),
            Field {
                up: Some(conditions::machine_from_go),
                down: Some(conditions::machine_shown_in_go),
                ..same("/status/conditions")
            },
        ],
    ],
    go_required: &["/spec/image", "/spec/size"],
    capms_required: &["/spec/image", "/spec/machineType"],
};

/// The Go provider's machine template holds a whole MetalStackMachine (with apiVersion, kind
/// and status, which nothing reads); capms's holds metadata and spec, as Cluster API's do.
pub static MACHINE_TEMPLATE: ConvertedKind = ConvertedKind {
    name: "MetalStackMachineTemplate",
    fields: &[
        &machine_spec!("/spec/template/spec"),
        &[
            same("/spec/template/metadata"),
            go_only("/spec/template/apiVersion"),
            go_only("/spec/template/kind"),
            go_only("/spec/template/status"),
            capms_only("/status/capacity"),
            capms_only("/status/nodeInfo"),
            capms_only("/status/conditions"),
        ],
    ],
    go_required: &["/spec/template/spec/image", "/spec/template/spec/size"],
    capms_required: &[
        "/spec/template/spec/image",
        "/spec/template/spec/machineType",
    ],
};

/// The Go provider's firewall template is the firewall-controller-manager's FirewallSpec;
/// capms's describes a MetalStackFirewall. The rules differ in the case of their protocol.
pub(crate) static FIREWALL_TEMPLATE: ConvertedKind = ConvertedKind {
    name: "MetalStackFirewallTemplate",
    fields: &[&[
        moved("/spec/image", "/spec/template/spec/image"),
        moved("/spec/size", "/spec/template/spec/machineType"),
        Field {
            up: Some(no_list_is_absent),
            down: Some(absent_is_no_list),
            ..moved("/spec/networks", "/spec/template/spec/networks")
        },
        moved("/spec/sshPublicKeys", "/spec/template/spec/sshKeys"),
        Field {
            up: Some(rules_protocol_lowercase),
            down: Some(rules_protocol_uppercase),
            ..moved("/spec/initialRuleSet", "/spec/template/spec/rules")
        },
        capms_only("/spec/template/metadata"),
        capms_only("/spec/template/spec/providerID"),
        required_go_only("/spec/partition"),
        required_go_only("/spec/project"),
        go_only("/spec/allowedNetworks"),
        go_only("/spec/controllerURL"),
        go_only("/spec/controllerVersion"),
        go_only("/spec/dnsPort"),
        go_only("/spec/dnsServerAddress"),
        go_only("/spec/dryRun"),
        go_only("/spec/egressRules"),
        go_only("/spec/internalPrefixes"),
        go_only("/spec/interval"),
        go_only("/spec/ipv4RuleFile"),
        go_only("/spec/logAcceptedConnections"),
        go_only("/spec/nftablesExporterURL"),
        go_only("/spec/nftablesExporterVersion"),
        go_only("/spec/rateLimits"),
        go_only("/spec/userdata"),
        go_only("/spec/userdataContents"),
    ]],
    go_required: &[
        "/spec/image",
        "/spec/size",
        "/spec/networks",
        "/spec/partition",
        "/spec/project",
    ],
    capms_required: &[
        "/spec/template/spec/image",
        "/spec/template/spec/machineType",
    ],
};

fn rules_protocol_lowercase(rules: Option<Value>) -> Option<Value> {
    rules.map(|r| with_protocols(r, |p| p.to_lowercase()))
}

fn rules_protocol_uppercase(rules: Option<Value>) -> Option<Value> {
    rules.map(|r| with_protocols(r, |p| p.to_uppercase()))
}

/// The rule set with `case` applied to the protocol of every egress and ingress rule; anything
/// else is left as it is.
fn with_protocols(mut rules: Value, case: fn(&str) -> String) -> Value {
    for direction in ["egress", "ingress"] {
        let Some(list) = rules.get_mut(direction).and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in list {
            let Some(protocol) = rule.get_mut("protocol") else {
                continue;
            };
            if let Some(text) = protocol.as_str() {
                *protocol = Value::String(case(text));
            }
        }
    }
    rules
}
