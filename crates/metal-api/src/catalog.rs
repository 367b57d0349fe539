//! A snapshot of what metal-api knows that a spec can name: partitions, sizes, images,
//! projects, networks and machines.

use crate::types::{Image, Machine, MachineFindRequest, Network, Partition, Project, Size};

#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub partitions: Vec<Partition>,
    pub sizes: Vec<Size>,
    pub images: Vec<Image>,
    pub projects: Vec<Project>,
    pub networks: Vec<Network>,
    pub machines: Vec<Machine>,
}

impl Catalog {
    /// Everything, read at once.
    pub async fn fetch(client: &crate::Client) -> Result<Catalog, crate::Error> {
        let all_machines = MachineFindRequest::default();
        let (partitions, sizes, images, projects, networks, machines) = tokio::try_join!(
            client.partitions(),
            client.sizes(),
            client.images(),
            client.projects(),
            client.networks(),
            client.machine_find(&all_machines),
        )?;
        Ok(Catalog {
            partitions,
            sizes,
            images,
            projects,
            networks,
            machines,
        })
    }
}
