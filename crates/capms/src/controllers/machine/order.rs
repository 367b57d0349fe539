//! Everything a machine allocation is made of: the request metal-api gets for a
//! MetalStackMachine, with its owner tags, network, bootstrap data and placement.

use super::PURPOSE;
use crate::api::{MetalStackCluster, MetalStackMachine};
use crate::ownership::{OwnerKind, cluster_tag, identity_of, owner_marks_of, owner_tags};
use kube::ResourceExt;
use metal_api::tags::{HOSTNAME, ZONE};
use metal_api::types::{AllocationNetwork, MachineAllocateRequest};

/// Everything a machine allocation is made of.
pub struct Order<'a> {
    pub msm: &'a MetalStackMachine,
    pub msc: &'a MetalStackCluster,
    pub partition: &'a str,
    pub network: String,
    pub user_data: &'a str,
    pub control_plane: bool,
    /// The machine allocated by id: the one spec.providerID names, or the one picked in the
    /// rack the Machine names.
    pub preset: Option<String>,
}

impl Order<'_> {
    pub fn request(&self) -> MachineAllocateRequest {
        let msm = self.msm;
        let ns = msm.namespace().unwrap_or_default();
        let name = msm.name_any();
        let cluster = self.msc.name_any();
        let marks = owner_marks_of(OwnerKind::Machine, msm);
        let cluster_tag = cluster_tag(&ns, &cluster);
        let purpose = if self.control_plane {
            "control-plane"
        } else {
            "worker"
        };
        let hostname = cloud_config_hostname(self.user_data).unwrap_or_else(|| name.clone());
        let mut tags = owner_tags(&marks);
        tags.push(cluster_tag.clone());
        tags.push(format!("{PURPOSE}={purpose}"));
        // The tags metal-stack's Go provider puts on its machines, which its users filter by.
        tags.extend(owner_tags(&identity_of(OwnerKind::Cluster, self.msc)));
        tags.push(format!("{ZONE}={}", self.partition));
        tags.push(format!("{HOSTNAME}={hostname}"));
        tags.extend(msm.spec.tags.iter().cloned());
        MachineAllocateRequest {
            uuid: self.preset.clone(),
            name: name.clone(),
            description: format!("{ns}/{name} of cluster {ns}/{cluster}, allocated by capms"),
            hostname,
            projectid: self.msc.spec.project_id.clone(),
            partitionid: self.partition.to_owned(),
            sizeid: msm.spec.machine_type.clone(),
            imageid: msm.spec.image.clone(),
            networks: Some(vec![AllocationNetwork {
                networkid: self.network.clone(),
                autoacquire: Some(true),
            }]),
            ssh_pub_keys: msm.spec.ssh_keys.clone(),
            user_data: self.user_data.to_owned(),
            tags,
            // Spread a cluster's control-plane machines over racks.
            placement_tags: if self.control_plane {
                vec![cluster_tag, format!("{PURPOSE}=control-plane")]
            } else {
                Vec::new()
            },
            ..Default::default()
        }
    }
}

/// The hostname a cloud-config bootstrap gives the machine (its top-level `hostname`), so that
/// metal-api's allocation, and with it the Hostname address, names the machine as the node will
/// call itself. None for other formats, templated values and names that are not a DNS label.
pub(crate) fn cloud_config_hostname(user_data: &str) -> Option<String> {
    let body = user_data.trim_start();
    // cloud-init's Jinja header may precede the cloud-config marker.
    let body = body
        .strip_prefix("## template: jinja")
        .map(str::trim_start)
        .unwrap_or(body);
    if !body.starts_with("#cloud-config") {
        return None;
    }
    let config: serde_json::Value = serde_saphyr::from_str(body).ok()?;
    let hostname = config.get("hostname")?.as_str()?;
    let is_label = (1..=63).contains(&hostname.len())
        && hostname
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !hostname.starts_with('-')
        && !hostname.ends_with('-');
    is_label.then(|| hostname.to_owned())
}
