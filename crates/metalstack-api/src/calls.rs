//! The calls capms makes, typed: one method per RPC, named for what it does.

use crate::client::Client;
use crate::error::Error;
use crate::types::catalog::{
    HealthServiceGetRequest, Image, ImageServiceLatestRequest, ImageServiceListRequest, Partition,
    PartitionServiceListRequest, Project, ProjectServiceGetRequest, Size,
    SizeImageConstraintServiceTryRequest, SizeServiceListRequest,
};
use crate::types::machine::{
    Machine, MachineBMCCommand, MachineServiceBMCCommandRequest, MachineServiceCreateRequest,
    MachineServiceDeleteRequest, MachineServiceGetRequest, MachineServiceListRequest,
};
use crate::types::network::{
    IP, IPServiceCreateRequest, IPServiceDeleteRequest, IPServiceGetRequest, IPServiceListRequest,
    Network, NetworkServiceCreateRequest, NetworkServiceDeleteRequest, NetworkServiceGetRequest,
    NetworkServiceListBaseNetworksRequest, NetworkServiceListRequest,
};

impl Client {
    /// `MachineService/Get`.
    pub async fn machine(&self, project: &str, uuid: &str) -> Result<Machine, Error> {
        let request = MachineServiceGetRequest {
            uuid: uuid.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.machine)
    }

    /// `MachineService/List`: one call for all machines a query finds.
    pub async fn machines(
        &self,
        request: &MachineServiceListRequest,
    ) -> Result<Vec<Machine>, Error> {
        Ok(self.call(request).await?.machines)
    }

    /// `MachineService/Create`: a machine or firewall allocated; it installs afterwards.
    pub async fn create_machine(
        &self,
        request: &MachineServiceCreateRequest,
    ) -> Result<Machine, Error> {
        Ok(self.call(request).await?.machine)
    }

    /// `MachineService/Delete`: answers once the machine is freed, which can take minutes; call
    /// it where nothing else waits on the answer.
    pub async fn delete_machine(&self, project: &str, uuid: &str) -> Result<Machine, Error> {
        let request = MachineServiceDeleteRequest {
            uuid: uuid.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.machine)
    }

    /// `MachineService/BMCCommand`: queued for the machine's BMC; answers at once.
    pub async fn bmc_command(
        &self,
        project: &str,
        uuid: &str,
        command: MachineBMCCommand,
    ) -> Result<(), Error> {
        let request = MachineServiceBMCCommandRequest {
            uuid: uuid.to_owned(),
            project: project.to_owned(),
            command,
        };
        self.call(&request).await.map(drop)
    }

    /// `NetworkService/Create`.
    pub async fn create_network(
        &self,
        request: &NetworkServiceCreateRequest,
    ) -> Result<Network, Error> {
        Ok(self.call(request).await?.network)
    }

    /// `NetworkService/Get`: a network of the project, or a base network.
    pub async fn network(&self, project: &str, id: &str) -> Result<Network, Error> {
        let request = NetworkServiceGetRequest {
            id: id.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.network)
    }

    /// `NetworkService/Delete`.
    pub async fn delete_network(&self, project: &str, id: &str) -> Result<Network, Error> {
        let request = NetworkServiceDeleteRequest {
            id: id.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.network)
    }

    /// `NetworkService/List`: the project's networks.
    pub async fn networks(
        &self,
        request: &NetworkServiceListRequest,
    ) -> Result<Vec<Network>, Error> {
        Ok(self.call(request).await?.networks)
    }

    /// `NetworkService/ListBaseNetworks`: the super and external networks a project may use.
    pub async fn base_networks(
        &self,
        request: &NetworkServiceListBaseNetworksRequest,
    ) -> Result<Vec<Network>, Error> {
        Ok(self.call(request).await?.networks)
    }

    /// `IPService/Create`.
    pub async fn create_ip(&self, request: &IPServiceCreateRequest) -> Result<IP, Error> {
        Ok(self.call(request).await?.ip)
    }

    /// `IPService/Get`: by the address.
    pub async fn ip(&self, project: &str, ip: &str) -> Result<IP, Error> {
        let request = IPServiceGetRequest {
            ip: ip.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.ip)
    }

    /// `IPService/Delete`: by the address.
    pub async fn delete_ip(&self, project: &str, ip: &str) -> Result<IP, Error> {
        let request = IPServiceDeleteRequest {
            ip: ip.to_owned(),
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.ip)
    }

    /// `IPService/List`.
    pub async fn ips(&self, request: &IPServiceListRequest) -> Result<Vec<IP>, Error> {
        Ok(self.call(request).await?.ips)
    }

    /// `ImageService/Latest`: the newest image of `os` (`debian-13.0`).
    pub async fn latest_image(&self, os: &str) -> Result<Image, Error> {
        let request = ImageServiceLatestRequest { os: os.to_owned() };
        Ok(self.call(&request).await?.image)
    }

    /// `ImageService/List`.
    pub async fn images(&self) -> Result<Vec<Image>, Error> {
        Ok(self.call(&ImageServiceListRequest {}).await?.images)
    }

    /// `PartitionService/List`.
    pub async fn partitions(&self) -> Result<Vec<Partition>, Error> {
        Ok(self.call(&PartitionServiceListRequest {}).await?.partitions)
    }

    /// `SizeService/List`.
    pub async fn sizes(&self) -> Result<Vec<Size>, Error> {
        Ok(self.call(&SizeServiceListRequest {}).await?.sizes)
    }

    /// `ProjectService/Get`.
    pub async fn project(&self, project: &str) -> Result<Project, Error> {
        let request = ProjectServiceGetRequest {
            project: project.to_owned(),
        };
        Ok(self.call(&request).await?.project)
    }

    /// `HealthService/Get`: does the server answer?
    pub async fn health(&self) -> Result<(), Error> {
        self.call(&HealthServiceGetRequest {}).await.map(drop)
    }

    /// `SizeImageConstraintService/Try`: does `size` take `image`? A refusal is an error.
    pub async fn try_size_image(&self, size: &str, image: &str) -> Result<(), Error> {
        let request = SizeImageConstraintServiceTryRequest {
            size: size.to_owned(),
            image: image.to_owned(),
        };
        self.call(&request).await.map(drop)
    }
}
