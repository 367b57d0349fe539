//! The metal-api client against the simulator over loopback: the whole life of networks, IPs,
//! machines and firewalls (`lifecycle`), every error path (`errors`), the fault switches
//! (`faults`), and a machine's power and reinstall (`power`).

use crate::support;

mod errors;
mod faults;
mod lifecycle;
mod power;

use metal_api::Client;
use metal_api::error::Category;
use metal_api::hmac::AuthType;
use metal_api::types::*;
use metal_sim::inventory::Inventory;
use std::time::Duration;
use support::{RunningSim, eventually};

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKv3u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7 capms@test";

fn machine_request(network: &str, image: &str) -> MachineAllocateRequest {
    MachineAllocateRequest {
        name: "worker-0".into(),
        hostname: "worker-0".into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: image.into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.into(),
            autoacquire: None,
        }]),
        ssh_pub_keys: vec![SSH_KEY.into()],
        user_data: "#cloud-config\nhostname: worker-0\n".into(),
        tags: vec![
            "capms.test/owner=default.worker-0".into(),
            "machine.metal-stack.io/rack=user-override".into(),
        ],
        ..Default::default()
    }
}

async fn wait_for_event(client: &metal_api::Client, id: &str, event: &'static str) -> Machine {
    eventually(
        &format!("machine {id} to reach {event}"),
        Duration::from_secs(15),
        || async {
            let m = client.machine(id).await.ok()?;
            (m.last_event() == Some(event)).then_some(m)
        },
    )
    .await
}

fn status(result: Result<impl std::fmt::Debug, metal_api::Error>) -> (u16, String) {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => (
            e.status().unwrap_or(0),
            e.api_message().unwrap_or_default().to_owned(),
        ),
    }
}

/// A private network of the project in the lab's partition.
async fn private_network(client: &Client) -> Network {
    client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .await
        .expect("network")
}
