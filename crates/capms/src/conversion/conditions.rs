//! The Go provider's condition types, shown in `v1alpha1` beside capms's. Its users' dashboards,
//! alerts and `kubectl wait --for=condition=…` read them. Each is capms's condition for the same
//! step under the Go provider's name. Converting back to capms's schema drops them again, since
//! capms's condition is their source; one the Go provider stored with no capms counterpart yet
//! stays as it is.

use serde_json::Value;

/// For a MetalStackCluster: capms's condition type, and the Go provider's for the same step.
const CLUSTER: &[(&str, &str)] = &[
    ("NetworkReady", "ClusterNodeNetworkEnsured"),
    ("FirewallReady", "ClusterFirewallDeploymentEnsured"),
    ("ControlPlaneIPReady", "ClusterControlPlaneIPEnsured"),
];

/// For a MetalStackMachine (`MachineHealthy` and `Paused` have one name in both).
const MACHINE: &[(&str, &str)] = &[
    ("MachineAllocated", "MachineCreated"),
    ("Ready", "MachineReady"),
];

pub(super) fn cluster_shown_in_go(conditions: Option<Value>) -> Option<Value> {
    shown_in_go(conditions, CLUSTER)
}

pub(super) fn cluster_from_go(conditions: Option<Value>) -> Option<Value> {
    from_go(conditions, CLUSTER)
}

pub(super) fn machine_shown_in_go(conditions: Option<Value>) -> Option<Value> {
    shown_in_go(conditions, MACHINE)
}

pub(super) fn machine_from_go(conditions: Option<Value>) -> Option<Value> {
    from_go(conditions, MACHINE)
}

fn type_of(condition: &Value) -> Option<&str> {
    condition.get("type").and_then(Value::as_str)
}

/// capms's conditions with, for each of `names` capms reports, the Go provider's condition in
/// place of any it stored.
fn shown_in_go(conditions: Option<Value>, names: &[(&str, &str)]) -> Option<Value> {
    let Some(Value::Array(list)) = conditions else {
        return conditions;
    };
    let derived: Vec<Value> = names
        .iter()
        .filter_map(|(capms, go)| {
            let source = list.iter().find(|c| type_of(c) == Some(capms))?;
            let mut shown = source.clone();
            shown["type"] = Value::from(*go);
            Some(shown)
        })
        .collect();
    let replaced = |c: &Value| derived.iter().any(|d| type_of(d) == type_of(c));
    let mut out: Vec<Value> = list.iter().filter(|c| !replaced(c)).cloned().collect();
    out.extend(derived);
    Some(Value::Array(out))
}

/// The conditions without those [`shown_in_go`] derives from a capms condition present.
fn from_go(conditions: Option<Value>, names: &[(&str, &str)]) -> Option<Value> {
    let Some(Value::Array(list)) = conditions else {
        return conditions;
    };
    let has = |t: &str| list.iter().any(|c| type_of(c) == Some(t));
    let derived = |c: &Value| {
        names
            .iter()
            .any(|(capms, go)| type_of(c) == Some(go) && has(capms))
    };
    let kept: Vec<Value> = list.iter().filter(|c| !derived(c)).cloned().collect();
    Some(Value::Array(kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn types(conditions: &Value) -> Vec<&str> {
        let list = conditions.as_array().into_iter().flatten();
        list.filter_map(type_of).collect()
    }

    fn condition(t: &str, status: &str) -> Value {
        json!({"type": t, "status": status, "reason": "R", "message": "m",
               "lastTransitionTime": "2026-11-26T00:00:00Z"})
    }

    #[test]
    fn the_go_provider_s_types_show_capms_s_conditions() {
        let hub = json!([
            condition("Ready", "True"),
            condition("NetworkReady", "True"),
            condition("FirewallReady", "False")
        ]);
        let go = cluster_shown_in_go(Some(hub.clone())).expect("conditions");
        assert_eq!(
            types(&go),
            [
                "Ready",
                "NetworkReady",
                "FirewallReady",
                "ClusterNodeNetworkEnsured",
                "ClusterFirewallDeploymentEnsured"
            ]
        );
        assert_eq!(go[4]["status"], "False", "the status of FirewallReady");
        assert_eq!(
            cluster_from_go(Some(go)),
            Some(hub),
            "dropped again going back"
        );
    }

    #[test]
    fn a_stored_go_condition_is_replaced_only_when_capms_reports_the_step() {
        let stored = json!([
            condition("ClusterNodeNetworkEnsured", "False"),
            condition("ClusterControlPlaneIPEnsured", "True")
        ]);
        let hub = json!([
            condition("NetworkReady", "True"),
            condition("ClusterNodeNetworkEnsured", "False"),
            condition("ClusterControlPlaneIPEnsured", "True")
        ]);
        let go = cluster_shown_in_go(Some(hub)).expect("conditions");
        let network = go
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| type_of(c) == Some("ClusterNodeNetworkEnsured"))
            .expect("shown");
        assert_eq!(
            network["status"], "True",
            "capms's NetworkReady, not the stale one"
        );
        // Objects the Go provider stored, before capms reported anything: kept as they are.
        assert_eq!(cluster_from_go(Some(stored.clone())), Some(stored));
        assert_eq!(machine_shown_in_go(None), None);
        assert_eq!(machine_from_go(Some(json!("odd"))), Some(json!("odd")));
    }

    #[test]
    fn machines_show_created_and_ready() {
        let hub = json!([
            condition("Ready", "True"),
            condition("MachineAllocated", "True"),
            condition("MachineHealthy", "True")
        ]);
        let go = machine_shown_in_go(Some(hub.clone())).expect("conditions");
        assert_eq!(
            types(&go),
            [
                "Ready",
                "MachineAllocated",
                "MachineHealthy",
                "MachineCreated",
                "MachineReady"
            ]
        );
        assert_eq!(machine_from_go(Some(go)), Some(hub));
    }
}
