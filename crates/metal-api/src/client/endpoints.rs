//! metal-api's endpoints, each a method of the [`Client`]: over v1, or through API v2 when the
//! client was made for metal-apiserver.

use super::{Client, seg};
use crate::error::Error;
use crate::types::*;
use reqwest::Method;
use serde::de::DeserializeOwned;

impl Client {
    pub async fn health(&self) -> Result<HealthResponse, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("health", v2.health()).await;
        }
        self.get("health", "v1/health").await
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("partition_list", v2.partitions()).await;
        }
        self.list("partition_list", "v1/partition").await
    }

    pub async fn partition(&self, id: &str) -> Result<Partition, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("partition_get", v2.partition(id)).await;
        }
        self.get("partition_get", &format!("v1/partition/{}", seg(id)))
            .await
    }

    pub async fn sizes(&self) -> Result<Vec<Size>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("size_list", v2.sizes()).await;
        }
        self.list("size_list", "v1/size").await
    }

    pub async fn size(&self, id: &str) -> Result<Size, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("size_get", v2.size(id)).await;
        }
        self.get("size_get", &format!("v1/size/{}", seg(id))).await
    }

    pub async fn images(&self) -> Result<Vec<Image>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("image_list", v2.images()).await;
        }
        self.list("image_list", "v1/image").await
    }

    pub async fn image(&self, id: &str) -> Result<Image, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("image_get", v2.image(id)).await;
        }
        self.get("image_get", &format!("v1/image/{}", seg(id)))
            .await
    }

    /// Through v1, every size's image constraints (`GET /v1/size-image-constraint`, which any
    /// credentials may read). A metal-api that predates size image constraints answers 404: it
    /// has none.
    pub async fn size_image_constraints(
        &self,
    ) -> Result<Vec<crate::size_images::SizeImageConstraint>, Error> {
        let path = "v1/size-image-constraint";
        match self.list("size_image_constraint_list", path).await {
            Err(Error::Api { status: 404, .. }) => Ok(Vec::new()),
            listed => listed,
        }
    }

    /// Whether metal-api lets machines of `size` take `image` (its size image constraints):
    /// Err naming the violated constraint when it does not. Through v1 only metal-api's admins
    /// may ask (`POST /v1/size-image-constraint/try`); through API v2 any project token
    /// (`SizeImageConstraintService/Try`).
    pub async fn try_size_image(&self, size: &str, image: &str) -> Result<(), Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2("size_image_try", v2.try_size_image(size, image))
                .await;
        }
        let request = crate::size_images::SizeImageConstraintTryRequest {
            size: size.to_owned(),
            image: image.to_owned(),
        };
        let path = "v1/size-image-constraint/try";
        let _: serde::de::IgnoredAny = self.find("size_image_try", path, &request).await?;
        Ok(())
    }

    /// The image a name resolves to under metal-api's version rules.
    pub async fn image_latest(&self, id: &str) -> Result<Image, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("image_latest", v2.image_latest(id)).await;
        }
        self.get("image_latest", &format!("v1/image/{}/latest", seg(id)))
            .await
    }

    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("project_list", v2.projects()).await;
        }
        self.list("project_list", "v1/project").await
    }

    pub async fn project(&self, id: &str) -> Result<Project, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("project_get", v2.project(id)).await;
        }
        self.get("project_get", &format!("v1/project/{}", seg(id)))
            .await
    }

    pub async fn networks(&self) -> Result<Vec<Network>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("network_list", v2.networks()).await;
        }
        self.list("network_list", "v1/network").await
    }

    pub async fn network(&self, id: &str) -> Result<Network, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("network_get", v2.network(id)).await;
        }
        self.get("network_get", &format!("v1/network/{}", seg(id)))
            .await
    }

    pub async fn network_find(&self, req: &NetworkFindRequest) -> Result<Vec<Network>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("network_find", v2.network_find(req)).await;
        }
        self.find("network_find", "v1/network/find", req).await
    }

    pub async fn network_allocate(&self, req: &NetworkAllocateRequest) -> Result<Network, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2("network_allocate", v2.network_allocate(req))
                .await;
        }
        self.write(
            "network_allocate",
            Method::POST,
            "v1/network/allocate",
            Some(req),
        )
        .await
    }

    pub async fn network_free(&self, id: &str) -> Result<Network, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("network_free", v2.network_free(id)).await;
        }
        self.write::<(), _>(
            "network_free",
            Method::DELETE,
            &format!("v1/network/free/{}", seg(id)),
            None,
        )
        .await
    }

    pub async fn ip(&self, address: &str) -> Result<Ip, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("ip_get", v2.ip(address)).await;
        }
        self.get("ip_get", &format!("v1/ip/{}", seg(address))).await
    }

    pub async fn ip_find(&self, req: &IpFindRequest) -> Result<Vec<Ip>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("ip_find", v2.ip_find(req)).await;
        }
        self.find("ip_find", "v1/ip/find", req).await
    }

    pub async fn ip_allocate(&self, req: &IpAllocateRequest) -> Result<Ip, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("ip_allocate", v2.ip_allocate(req, None)).await;
        }
        self.write("ip_allocate", Method::POST, "v1/ip/allocate", Some(req))
            .await
    }

    /// Allocates exactly `address`; 409 when it is taken.
    pub async fn ip_allocate_specific(
        &self,
        address: &str,
        req: &IpAllocateRequest,
    ) -> Result<Ip, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2("ip_allocate_specific", v2.ip_allocate(req, Some(address)))
                .await;
        }
        self.write(
            "ip_allocate_specific",
            Method::POST,
            &format!("v1/ip/allocate/{}", seg(address)),
            Some(req),
        )
        .await
    }

    pub async fn ip_free(&self, address: &str) -> Result<Ip, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("ip_free", v2.ip_free(address)).await;
        }
        self.write::<(), _>(
            "ip_free",
            Method::DELETE,
            &format!("v1/ip/free/{}", seg(address)),
            None,
        )
        .await
    }

    pub async fn machine(&self, id: &str) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("machine_get", v2.machine(id)).await;
        }
        self.get("machine_get", &format!("v1/machine/{}", seg(id)))
            .await
    }

    pub async fn machine_find(&self, req: &MachineFindRequest) -> Result<Vec<Machine>, Error> {
        self.machine_find_as(req).await
    }

    /// The machines `req` finds, each decoded as `R` instead of a whole [`Machine`]: a type
    /// holding part of the machine response (such as [`crate::MachineSummary`]), or one that
    /// decodes it leaving out what its reader does not need.
    pub async fn machine_find_as<R: DeserializeOwned>(
        &self,
        req: &MachineFindRequest,
    ) -> Result<Vec<R>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("machine_find", v2.machine_find_as(req)).await;
        }
        self.find("machine_find", "v1/machine/find", req).await
    }

    pub async fn machine_allocate(&self, req: &MachineAllocateRequest) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2("machine_allocate", v2.machine_allocate(req, None))
                .await;
        }
        self.write(
            "machine_allocate",
            Method::POST,
            "v1/machine/allocate",
            Some(req),
        )
        .await
    }

    pub async fn machine_free(&self, id: &str) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("machine_free", v2.machine_free(id)).await;
        }
        self.write::<(), _>(
            "machine_free",
            Method::DELETE,
            &format!("v1/machine/{}/free", seg(id)),
            None,
        )
        .await
    }

    /// Sends a power action to the machine's BMC. Never retried: a second power cycle would
    /// reboot a machine that is already coming back.
    pub async fn machine_power(&self, id: &str, action: PowerAction) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2(action.endpoint(), v2.machine_power(id, action))
                .await;
        }
        let endpoint = action.endpoint();
        let path = format!("v1/machine/{}/power/{}", seg(id), action.segment());
        let body = serde_json::json!({});
        self.write(endpoint, Method::POST, &path, Some(&body)).await
    }

    /// Installs `imageid` on the machine again, keeping its allocation.
    pub async fn machine_reinstall(&self, id: &str, imageid: &str) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2("machine_reinstall", v2.machine_reinstall(id, imageid))
                .await;
        }
        let body = MachineReinstallRequest {
            id: id.to_owned(),
            imageid: imageid.to_owned(),
            ..Default::default()
        };
        let path = format!("v1/machine/{}/reinstall", seg(id));
        self.write("machine_reinstall", Method::POST, &path, Some(&body))
            .await
    }

    pub async fn firewall(&self, id: &str) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("firewall_get", v2.machine(id)).await;
        }
        self.get("firewall_get", &format!("v1/firewall/{}", seg(id)))
            .await
    }

    pub async fn firewall_find(&self, req: &MachineFindRequest) -> Result<Vec<Machine>, Error> {
        if let Some(v2) = &self.v2 {
            return self.via_v2("firewall_find", v2.firewall_find(req)).await;
        }
        self.find("firewall_find", "v1/firewall/find", req).await
    }

    pub async fn firewall_allocate(&self, req: &FirewallCreateRequest) -> Result<Machine, Error> {
        if let Some(v2) = &self.v2 {
            return self
                .via_v2(
                    "firewall_allocate",
                    v2.machine_allocate(
                        &req.machine,
                        Some(
                            req.firewall_rules
                                .as_ref()
                                .unwrap_or(&FirewallRules::default()),
                        ),
                    ),
                )
                .await;
        }
        self.write(
            "firewall_allocate",
            Method::POST,
            "v1/firewall/allocate",
            Some(req),
        )
        .await
    }
}
