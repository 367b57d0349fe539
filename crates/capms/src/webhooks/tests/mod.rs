use super::rules::*;
use super::*;
use crate::api::{
    ApiEndpoint, EgressRule, FirewallRules, MetalStackClusterSpec, MetalStackFirewallSpec,
    MetalStackMachineSpec,
};
use crate::ownership::OwnerKind;
use axum::http::{Request, StatusCode};
use metal_api::Catalog;
use metal_sim::inventory::Inventory;
use metal_sim::state::State as SimState;
use tower::ServiceExt;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

fn lab() -> SimState {
    SimState::from_inventory(&Inventory::default_lab()).expect("inventory")
}

/// A private network of the lab's project, allocated in `state`.
fn private_network(state: &mut SimState) -> String {
    let request = metal_api::types::NetworkAllocateRequest {
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        ..Default::default()
    };
    state.network_allocate(&request).expect("network").id
}

fn catalog() -> Catalog {
    lab().catalog()
}

fn cluster_spec() -> MetalStackClusterSpec {
    MetalStackClusterSpec {
        control_plane_endpoint: None,
        partition: "mini-lab".into(),
        project_id: PROJECT.into(),
        public_network_id: Some("internet-mini-lab".into()),
        private_network_id: None,
        control_plane_ip: None,
        firewall_deployment_ref: None,
        credentials_ref: None,
        firewall_spec: Some(MetalStackFirewallSpec {
            image: "firewall-ubuntu-3.0".into(),
            machine_type: "v1-small-x86".into(),
            ..Default::default()
        }),
        firewall_template_ref: None,
    }
}

fn machine_spec() -> MetalStackMachineSpec {
    MetalStackMachineSpec {
        image: "ubuntu-26.4".into(),
        machine_type: "v1-small-x86".into(),
        partition: Some("mini-lab".into()),
        ..Default::default()
    }
}

fn errors_of(f: impl FnOnce(&mut Report)) -> Vec<String> {
    let mut report = Report::default();
    f(&mut report);
    report.errors.iter().map(ToString::to_string).collect()
}

mod configurations;
mod handlers;
mod rules;
mod takeover;
mod template_users;
mod updates;
