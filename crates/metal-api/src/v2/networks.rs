//! Networks and IPs through v2, in metal-api's model. A project token sees its project's
//! networks and the base networks (super, external, underlay) any project may use; a find
//! lists one of those and keeps what matches every field it gives.

use super::{Backend, Failure, Result, carries, labels_of, tags_of};
use crate::types::{
    Ip, IpAllocateRequest, IpFindRequest, Network, NetworkAllocateRequest, NetworkFindRequest,
};
use metalstack_api::types::Meta;
use metalstack_api::types::network::{
    self as v2, ChildPrefixLength, IPServiceCreateRequest, IPServiceListRequest, IPType, NATType,
    NetworkServiceCreateRequest, NetworkServiceListBaseNetworksRequest, NetworkServiceListRequest,
    NetworkType,
};
use std::collections::BTreeMap;

/// A network type as v1 writes it (`child`, `super`, `external`, …).
pub(super) fn network_type(t: NetworkType) -> &'static str {
    match t {
        NetworkType::External => "external",
        NetworkType::Underlay => "underlay",
        NetworkType::Super => "super",
        NetworkType::SuperNamespaced => "super-namespaced",
        NetworkType::Child => "child",
        NetworkType::ChildShared => "child-shared",
        NetworkType::Unspecified => "",
    }
}

/// A NAT type as v1 writes it.
pub(super) fn nat_type(t: NATType) -> &'static str {
    match t {
        NATType::Ipv4Masquerade => "ipv4-masq",
        NATType::None => "none",
        NATType::Unspecified => "",
    }
}

fn network(n: v2::Network) -> Network {
    let lengths = n.default_child_prefix_length.map(|l| {
        let mut lengths = BTreeMap::new();
        let mut put = |family: &str, length: Option<u32>| {
            if let Some(length) = length.and_then(|l| u8::try_from(l).ok()) {
                lengths.insert(family.to_owned(), length);
            }
        };
        put("IPv4", l.ipv4);
        put("IPv6", l.ipv6);
        lengths
    });
    Network {
        labels: Meta::labels(n.meta.as_ref()),
        name: n.name.unwrap_or_default(),
        partitionid: n.partition.unwrap_or_default(),
        projectid: n.project.unwrap_or_default(),
        shared: n.type_ == NetworkType::ChildShared,
        prefixes: n.prefixes,
        destinationprefixes: n.destination_prefixes,
        defaultchildprefixlength: lengths,
        nat: n.nat_type == NATType::Ipv4Masquerade,
        privatesuper: matches!(n.type_, NetworkType::Super | NetworkType::SuperNamespaced),
        underlay: n.type_ == NetworkType::Underlay,
        vrf: n.vrf,
        parentnetworkid: n.parent_network,
        networktype: network_type(n.type_).into(),
        nattype: nat_type(n.nat_type).into(),
        id: n.id,
        ..Default::default()
    }
}

/// Does `n` match every field `find` gives?
fn found(n: &Network, find: &NetworkFindRequest) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    let flag = |want: Option<bool>, have: bool| want.is_none_or(|w| w == have);
    let labelled = find
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| n.labels.get(k) == Some(v));
    is(&find.id, &n.id)
        && is(&find.name, &n.name)
        && is(&find.partitionid, &n.partitionid)
        && is(&find.projectid, &n.projectid)
        && (find.parentnetworkid.is_none() || find.parentnetworkid == n.parentnetworkid)
        && labelled
        && flag(find.privatesuper, n.privatesuper)
        && flag(find.underlay, n.underlay)
        && flag(find.nat, n.nat)
        && find.vrf.is_none_or(|v| n.vrf == Some(v))
}

fn ip(i: v2::IP) -> Ip {
    let type_ = match i.type_ {
        IPType::Static => "static",
        IPType::Ephemeral | IPType::Unspecified => "ephemeral",
    };
    Ip {
        ipaddress: i.ip,
        allocationuuid: i.uuid,
        name: i.name,
        networkid: i.network,
        projectid: i.project,
        type_: type_.into(),
        tags: tags_of(&Meta::labels(i.meta.as_ref())),
        ..Default::default()
    }
}

/// Does `ip` match every field `find` gives?
fn ip_found(ip: &Ip, find: &IpFindRequest) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    is(&find.ipaddress, &ip.ipaddress)
        && is(&find.allocationuuid, &ip.allocationuuid)
        && is(&find.name, &ip.name)
        && is(&find.networkid, &ip.networkid)
        && is(&find.projectid, &ip.projectid)
        && is(&find.type_, &ip.type_)
        && carries(&ip.tags, &find.tags)
}

impl Backend {
    /// The project's networks and the base networks.
    pub(crate) async fn networks(&self) -> Result<Vec<Network>> {
        let mut all = self.project_networks(&self.project).await?;
        all.extend(self.base_networks().await?);
        Ok(all)
    }

    async fn project_networks(&self, project: &str) -> Result<Vec<Network>> {
        let request = NetworkServiceListRequest {
            project: project.to_owned(),
            query: None,
        };
        let listed = self.api.networks(&request).await?;
        Ok(listed.into_iter().map(network).collect())
    }

    async fn base_networks(&self) -> Result<Vec<Network>> {
        let request = NetworkServiceListBaseNetworksRequest {
            project: self.project.clone(),
            query: None,
        };
        let listed = self.api.base_networks(&request).await?;
        Ok(listed.into_iter().map(network).collect())
    }

    pub(crate) async fn network(&self, id: &str) -> Result<Network> {
        Ok(network(self.api.network(&self.project, id).await?))
    }

    /// A find for base networks (super, underlay) lists those; any other the project's.
    pub(crate) async fn network_find(&self, find: &NetworkFindRequest) -> Result<Vec<Network>> {
        let base = find.privatesuper == Some(true) || find.underlay == Some(true);
        let listed = if base {
            self.base_networks().await?
        } else {
            let project = find.projectid.as_deref().unwrap_or(&self.project);
            self.project_networks(project).await?
        };
        Ok(listed.into_iter().filter(|n| found(n, find)).collect())
    }

    /// A child network of the partition's super network.
    pub(crate) async fn network_allocate(&self, req: &NetworkAllocateRequest) -> Result<Network> {
        if req.shared || req.nat || !req.destinationprefixes.is_empty() {
            return Err(Failure::Unsupported(
                "API v2 makes a project's child network without sharing, NAT or destination \
                 prefixes"
                    .into(),
            ));
        }
        let length = |family: &str| req.length.get(family).map(|l| u32::from(*l));
        let length = (!req.length.is_empty()).then(|| ChildPrefixLength {
            ipv4: length("IPv4"),
            ipv6: length("IPv6"),
        });
        let request = NetworkServiceCreateRequest {
            project: req.projectid.clone(),
            name: Some(req.name.clone()).filter(|n| !n.is_empty()),
            description: Some(req.description.clone()).filter(|d| !d.is_empty()),
            partition: Some(req.partitionid.clone()).filter(|p| !p.is_empty()),
            labels: Some(metalstack_api::types::Labels {
                labels: req.labels.clone(),
            }),
            length,
            ..Default::default()
        };
        Ok(network(self.api.create_network(&request).await?))
    }

    pub(crate) async fn network_free(&self, id: &str) -> Result<Network> {
        Ok(network(self.api.delete_network(&self.project, id).await?))
    }

    pub(crate) async fn ip(&self, address: &str) -> Result<Ip> {
        Ok(ip(self.api.ip(&self.project, address).await?))
    }

    pub(crate) async fn ip_find(&self, find: &IpFindRequest) -> Result<Vec<Ip>> {
        let request = IPServiceListRequest {
            project: find
                .projectid
                .clone()
                .unwrap_or_else(|| self.project.clone()),
            query: None,
        };
        let listed = self.api.ips(&request).await?.into_iter().map(ip);
        Ok(listed.filter(|i| ip_found(i, find)).collect())
    }

    /// Any address of the network, or `address`.
    pub(crate) async fn ip_allocate(
        &self,
        req: &IpAllocateRequest,
        address: Option<&str>,
    ) -> Result<Ip> {
        if req.machineid.is_some() {
            return Err(Failure::Unsupported(
                "capms does not scope an IP to a machine through API v2".into(),
            ));
        }
        let type_ = if req.type_ == "static" {
            IPType::Static
        } else {
            IPType::Ephemeral
        };
        let request = IPServiceCreateRequest {
            network: req.networkid.clone(),
            project: req.projectid.clone(),
            name: Some(req.name.clone()).filter(|n| !n.is_empty()),
            description: Some(req.description.clone()).filter(|d| !d.is_empty()),
            ip: address.map(str::to_owned),
            labels: Some(metalstack_api::types::Labels {
                labels: labels_of(&req.tags),
            }),
            type_: Some(type_),
        };
        Ok(ip(self.api.create_ip(&request).await?))
    }

    pub(crate) async fn ip_free(&self, address: &str) -> Result<Ip> {
        Ok(ip(self.api.delete_ip(&self.project, address).await?))
    }
}
