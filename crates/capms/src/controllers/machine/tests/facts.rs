//! What capms reads from a machine and its bootstrap data: the hostname and the addresses.

use super::*;
use crate::controllers::machine::order::cloud_config_hostname;

#[test]
fn the_hostname_comes_from_a_cloud_config_only() {
    let seed = "#cloud-config\nhostname: node-1\n";
    assert_eq!(cloud_config_hostname(seed).as_deref(), Some("node-1"));
    let jinja = "## template: jinja\n#cloud-config\nhostname: cp-0\nruncmd: [true]\n";
    assert_eq!(cloud_config_hostname(jinja).as_deref(), Some("cp-0"));
    for none in [
        "#!/bin/sh\nhostname node-1\n",
        "{\"ignition\": {\"version\": \"3.4.0\"}}",
        "#cloud-config\nruncmd: [true]\n",
        "#cloud-config\nhostname: '{{ ds.meta_data.local_hostname }}'\n",
        "#cloud-config\nhostname: Node_1\n",
        "#cloud-config\nhostname: [not, a, name]\n",
        "#cloud-config\n: broken: yaml\n",
    ] {
        assert_eq!(cloud_config_hostname(none), None, "{none:?}");
    }
}

#[test]
fn addresses_come_from_the_allocation() {
    let m = Machine {
        allocation: Some(MachineAllocation {
            hostname: "worker-0".into(),
            networks: vec![
                MachineNetwork {
                    networktype: "external".into(),
                    ips: vec!["127.100.0.7".into()],
                    ..Default::default()
                },
                MachineNetwork {
                    networktype: "privateprimaryunshared".into(),
                    ips: vec!["127.16.0.1".into()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let got: Vec<_> = addresses_of(&m)
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        got,
        [
            (MachineAddressType::InternalIp, "127.16.0.1".into()),
            (MachineAddressType::ExternalIp, "127.100.0.7".into()),
            (MachineAddressType::Hostname, "worker-0".into()),
            (MachineAddressType::InternalDns, "worker-0".into()),
        ]
    );
    assert!(addresses_of(&Machine::default()).is_empty());
}

#[test]
fn the_primary_private_network_s_addresses_come_first() {
    for primary in ["privateprimaryunshared", "privateprimaryshared"] {
        let network = |networktype: &str, ip: &str| MachineNetwork {
            networktype: networktype.into(),
            ips: vec![ip.into()],
            ..Default::default()
        };
        let m = Machine {
            allocation: Some(MachineAllocation {
                networks: vec![
                    network("privatesecondaryshared", "127.16.8.1"),
                    network(primary, "127.16.0.1"),
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let got: Vec<String> = addresses_of(&m).into_iter().map(|a| a.address).collect();
        assert_eq!(got, ["127.16.0.1", "127.16.8.1"], "{primary}");
    }
}
