//! The metal-api client against the simulator over loopback: the whole life of networks, IPs,
//! machines and firewalls (`lifecycle`), every error path (`errors`), and the fault switches
//! (`faults`).

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

mod support;

#[path = "metal_sim/errors.rs"]
mod errors;
#[path = "metal_sim/faults.rs"]
mod faults;
#[path = "metal_sim/lifecycle.rs"]
mod lifecycle;

use capms::metal::Client;
use capms::metal::error::Category;
use capms::metal::hmac::AuthType;
use capms::metal::types::*;
use capms::sim::inventory::Inventory;
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

async fn wait_for_event(client: &capms::metal::Client, id: &str, event: &'static str) -> Machine {
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

fn status(result: Result<impl std::fmt::Debug, capms::metal::Error>) -> (u16, String) {
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
