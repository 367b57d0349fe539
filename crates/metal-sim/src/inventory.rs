//! What the simulator starts with: partitions, sizes, images, projects, networks, pre-reserved
//! IPs and machines, read from YAML.

use metal_api::types::Labels;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// The provider tenant; HMAC users belong to it.
    pub tenant: String,
    pub partitions: Vec<PartitionSpec>,
    pub sizes: Vec<SizeSpec>,
    pub images: Vec<ImageSpec>,
    pub projects: Vec<ProjectSpec>,
    pub networks: Vec<NetworkSpec>,
    #[serde(default)]
    pub ips: Vec<IpSpec>,
    pub machines: Vec<MachineSpec>,
    /// Size image constraints, as metal-api keeps them: a size's images must be of these versions.
    #[serde(default)]
    pub sizeimageconstraints: Vec<SizeImageConstraintSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct PartitionSpec {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct SizeSpec {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub constraints: Vec<metal_api::types::SizeConstraint>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub features: Vec<String>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub partitionid: String,
    #[serde(default)]
    pub privatesuper: bool,
    #[serde(default)]
    pub underlay: bool,
    #[serde(default)]
    pub nat: bool,
    #[serde(default)]
    pub vrf: Option<u32>,
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub destinationprefixes: Vec<String>,
    #[serde(default)]
    pub defaultchildprefixlength: Option<BTreeMap<String, u8>>,
    #[serde(default)]
    pub labels: Labels,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct IpSpec {
    pub ipaddress: String,
    pub networkid: String,
    pub projectid: String,
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    pub id: String,
    pub partition: String,
    pub size: String,
    pub rack: String,
}

/// What images machines of size `id` take: per image OS, a version constraint such as
/// `>= 22.04` (images of other OSes are not restricted).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct SizeImageConstraintSpec {
    pub id: String,
    pub images: BTreeMap<String, String>,
}

impl Inventory {
    pub fn parse(yaml: &str) -> Result<Inventory, String> {
        serde_saphyr::from_str(yaml).map_err(|e| e.to_string())
    }

    /// `builtin:default`, `builtin:seed000` or the path of a YAML file.
    pub fn load(source: &str) -> Result<Inventory, String> {
        match source {
            "builtin:default" => Ok(Self::default_lab()),
            "builtin:seed000" => Ok(Self::seed000()),
            path => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
                Self::parse(&text)
            }
        }
    }

    /// The built-in inventory modelled on mini-lab, every prefix inside 127.0.0.0/8.
    pub fn default_lab() -> Inventory {
        Self::builtin(include_str!("inventories/default.yaml"))
    }

    /// The inventory mirroring seed 000 (partition `vagrant`, `internet-vagrant-lab`, …).
    pub fn seed000() -> Inventory {
        Self::builtin(include_str!("inventories/seed000.yaml"))
    }

    fn builtin(yaml: &str) -> Inventory {
        match Self::parse(yaml) {
            Ok(inventory) => inventory,
            // The built-in files are covered by unit tests; failing here is a build defect.
            Err(e) => panic!("built-in inventory is invalid: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::IpNet;

    #[test]
    fn built_in_inventories_parse() {
        let lab = Inventory::default_lab();
        assert_eq!(lab.machines.len(), 6);
        let seed = Inventory::seed000();
        assert!(
            seed.machines
                .iter()
                .any(|m| m.id == "2294c949-88f6-5390-8154-fa53d93a3313")
        );
        assert!(
            seed.machines
                .iter()
                .any(|m| m.id == "e0ab02d2-27cd-5a5e-8efc-080ba80cf258")
        );
    }

    #[test]
    fn default_inventory_stays_on_loopback() {
        let loopback: IpNet = "127.0.0.0/8".parse().expect("cidr");
        let lab = Inventory::default_lab();
        for net in &lab.networks {
            for p in &net.prefixes {
                let p: IpNet = p.parse().expect("prefix");
                assert!(
                    loopback.contains(&p),
                    "{} prefix {p} is outside 127.0.0.0/8",
                    net.id
                );
            }
        }
        for ip in &lab.ips {
            assert!(
                loopback.contains(&ip.ipaddress.parse::<std::net::IpAddr>().expect("ip")),
                "{}",
                ip.ipaddress
            );
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = Inventory::parse("tenant: x\npartitions: []\nsizes: []\nimages: []\nprojects: []\nnetworks: []\nmachines: []\nbogus: 1\n")
            .expect_err("unknown field");
        assert!(err.contains("bogus"), "{err}");
    }
}
