//! Firewall rules: metal-api's validation and the normal form it stores.

use super::*;

pub(super) fn normalise_rules(rules: &FirewallRules) -> FirewallRules {
    let proto = |p: &str| {
        if p.is_empty() {
            "tcp".to_owned()
        } else {
            p.to_lowercase()
        }
    };
    FirewallRules {
        egress: rules
            .egress
            .iter()
            .map(|r| FirewallEgressRule {
                protocol: proto(&r.protocol),
                ..r.clone()
            })
            .collect(),
        ingress: rules
            .ingress
            .iter()
            .map(|r| FirewallIngressRule {
                protocol: proto(&r.protocol),
                ..r.clone()
            })
            .collect(),
    }
}

/// metal-api's firewall rule validation (400 on failure).
pub fn validate_firewall_rules(rules: &FirewallRules) -> SimResult<()> {
    let check = |protocol: &str,
                 ports: &[i32],
                 cidrs: Vec<&String>,
                 comment: &str|
     -> SimResult<()> {
        if !protocol.is_empty() && !["tcp", "udp"].contains(&protocol.to_lowercase().as_str()) {
            return Err(SimError::bad_request(format!(
                "invalid protocol: {protocol}"
            )));
        }
        if let Some(p) = ports.iter().find(|p| !(0..=65535).contains(*p)) {
            return Err(SimError::bad_request(format!("port is out of range: {p}")));
        }
        let mut families = BTreeSet::new();
        for c in cidrs {
            let parsed: IpNet = c
                .parse()
                .map_err(|_| SimError::bad_request(format!("invalid cidr: {c}")))?;
            families.insert(parsed.addr().is_ipv4());
        }
        if families.len() > 1 {
            return Err(SimError::bad_request(
                "mixed address family in one rule is not supported",
            ));
        }
        if comment.len() > 100 {
            return Err(SimError::bad_request(
                "comments can not exceed 100 characters",
            ));
        }
        if let Some(c) = comment
            .chars()
            .find(|c| !(c.is_ascii_alphabetic() || *c == '_' || *c == '-' || *c == ' '))
        {
            return Err(SimError::bad_request(format!(
                "illegal character in comment found, only: \"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_- \" allowed: {c:?}"
            )));
        }
        Ok(())
    };
    for r in &rules.egress {
        if r.ports.is_empty() || r.to.is_empty() {
            return Err(SimError::bad_request("egress rules need ports and to"));
        }
        check(&r.protocol, &r.ports, r.to.iter().collect(), &r.comment)?;
    }
    for r in &rules.ingress {
        if r.ports.is_empty() || r.from.is_empty() {
            return Err(SimError::bad_request("ingress rules need ports and from"));
        }
        check(
            &r.protocol,
            &r.ports,
            r.from.iter().chain(&r.to).collect(),
            &r.comment,
        )?;
    }
    Ok(())
}
