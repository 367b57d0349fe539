//! A machine's power and reinstall: what `POST /v1/machine/{id}/power/<action>` and
//! `POST /v1/machine/{id}/reinstall` take, and the IPMI view `POST /v1/machine/ipmi/find`
//! answers with.

use super::{Machine, epoch};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A power action metal-api sends to a machine's BMC, named as its route ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
pub enum PowerAction {
    On,
    Off,
    Reset,
    Cycle,
    Bios,
    Disk,
    Pxe,
    ChassisIdentifyLedOn,
    ChassisIdentifyLedOff,
}

impl PowerAction {
    /// The last segment of the action's route (`cycle`, `chassis-identify-led-on`).
    pub fn segment(self) -> &'static str {
        match self {
            PowerAction::On => "on",
            PowerAction::Off => "off",
            PowerAction::Reset => "reset",
            PowerAction::Cycle => "cycle",
            PowerAction::Bios => "bios",
            PowerAction::Disk => "disk",
            PowerAction::Pxe => "pxe",
            PowerAction::ChassisIdentifyLedOn => "chassis-identify-led-on",
            PowerAction::ChassisIdentifyLedOff => "chassis-identify-led-off",
        }
    }

    /// The client's name of the call, as metrics and crash points show it.
    pub fn endpoint(self) -> &'static str {
        match self {
            PowerAction::On => "machine_power_on",
            PowerAction::Off => "machine_power_off",
            PowerAction::Reset => "machine_power_reset",
            PowerAction::Cycle => "machine_power_cycle",
            PowerAction::Bios => "machine_power_bios",
            PowerAction::Disk => "machine_power_disk",
            PowerAction::Pxe => "machine_power_pxe",
            PowerAction::ChassisIdentifyLedOn => "machine_power_led_on",
            PowerAction::ChassisIdentifyLedOff => "machine_power_led_off",
        }
    }

    /// The action of a route's last segment.
    pub fn from_segment(segment: &str) -> Option<PowerAction> {
        use strum::IntoEnumIterator;
        PowerAction::iter().find(|a| a.segment() == segment)
    }
}

/// `v1.MachineReinstallRequest`: the image to install again, on the same allocation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineReinstallRequest {
    pub id: String,
    pub imageid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// `v1.MachineIPMI`: how the machine's BMC is reached, and its power state.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct MachineIpmi {
    /// `host:port` of the BMC.
    pub address: String,
    pub bmcversion: String,
    pub fru: MachineFru,
    pub interface: String,
    pub last_updated: Timestamp,
    pub mac: String,
    pub password: String,
    pub powermetric: PowerMetric,
    /// `ON` or `OFF`.
    pub powerstate: String,
    pub powersupplies: Vec<PowerSupply>,
    pub user: String,
}

impl Default for MachineIpmi {
    fn default() -> Self {
        MachineIpmi {
            address: String::new(),
            bmcversion: String::new(),
            fru: MachineFru::default(),
            interface: String::new(),
            last_updated: epoch(),
            mac: String::new(),
            password: String::new(),
            powermetric: PowerMetric::default(),
            powerstate: String::new(),
            powersupplies: Vec::new(),
            user: String::new(),
        }
    }
}

/// `v1.MachineFru`: the field replaceable unit data the BMC reports (every field optional).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineFru {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub board_mfg: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub board_mfg_serial: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub board_part_number: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chassis_part_number: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chassis_part_serial: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product_manufacturer: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product_part_number: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product_serial: String,
}

/// `v1.PowerMetric`: the machine's power draw as the BMC measures it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct PowerMetric {
    pub averageconsumedwatts: f32,
    pub intervalinmin: f32,
    pub maxconsumedwatts: f32,
    pub minconsumedwatts: f32,
}

/// `v1.PowerSupply`: one power supply unit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct PowerSupply {
    pub status: PowerSupplyStatus,
}

/// `v1.PowerSupplyStatus`: a power supply's health and state, as Redfish names them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct PowerSupplyStatus {
    pub health: String,
    pub state: String,
}

/// `v1.MachineIPMIResponse`: a machine with its IPMI connection data.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineIpmiResponse {
    #[serde(flatten)]
    pub machine: Machine,
    pub ipmi: MachineIpmi,
}
