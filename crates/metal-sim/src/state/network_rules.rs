//! metal-api's network rules for an allocation: which networks a machine or firewall may be
//! placed into, which one is primary, and the underlay every firewall gets.

use super::*;

/// One network of an allocation plan: the network, its machine network type, auto-acquire.
pub(super) type PlannedNetwork = (Network, &'static str, bool);

/// The requested networks sorted by kind, each with its auto-acquire flag.
#[derive(Default)]
struct Requested {
    private_unshared: Vec<(Network, bool)>,
    private_shared: Vec<(Network, bool)>,
    external: Vec<(Network, bool)>,
}

impl State {
    /// The network rules of an allocation: which networks, of which kind, with auto-acquire.
    pub(super) fn gather_networks(
        &self,
        requested: &[AllocationNetwork],
        ips: &[String],
        partition: &str,
        project: &str,
        role: &str,
    ) -> SimResult<Vec<PlannedNetwork>> {
        let ids: BTreeSet<&str> = requested.iter().map(|n| n.networkid.as_str()).collect();
        if ids.len() != requested.len() {
            return Err(SimError::unprocessable("given network ids are not unique"));
        }
        let mut sorted = Requested::default();
        for r in requested {
            self.sort_requested(r, ips, partition, project, &mut sorted)?;
        }
        let mut plan = primary_plan(sorted, role)?;
        if role == ROLE_FIREWALL {
            plan.push((
                self.underlay_of(partition)?,
                machine_network_type::UNDERLAY,
                true,
            ));
        }
        Ok(plan)
    }

    /// Checks one requested network and files it under its kind.
    fn sort_requested(
        &self,
        r: &AllocationNetwork,
        ips: &[String],
        partition: &str,
        project: &str,
        sorted: &mut Requested,
    ) -> SimResult<()> {
        let n = self
            .networks
            .get(&r.networkid)
            .ok_or_else(|| SimError::not_found("network", &r.networkid))?;
        if n.underlay {
            return Err(SimError::unprocessable(format!(
                "underlay networks are not allowed to be set explicitly: {}",
                n.id
            )));
        }
        if n.privatesuper {
            return Err(SimError::unprocessable(format!(
                "private super networks are not allowed to be set explicitly: {}",
                n.id
            )));
        }
        let auto = r.autoacquire.unwrap_or(true);
        if !self.is_private(n) {
            sorted.external.push((n.clone(), auto));
            return Ok(());
        }
        let supplied = ips
            .iter()
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .any(|a| self.prefix_of(n, a).is_some());
        if !auto && !supplied {
            return Err(SimError::unprocessable(format!(
                "the private network {} has no auto ip acquisition, but no suitable IPs were provided, which would lead into a machine having no ip address",
                n.id
            )));
        }
        if n.partitionid != partition {
            return Err(SimError::unprocessable(format!(
                "private network \"{}\" must be located in the partition where the machine is going to be placed",
                n.id
            )));
        }
        if !n.shared && n.projectid != project {
            return Err(SimError::unprocessable(
                "the given private network does not belong to the project, which is not allowed",
            ));
        }
        if n.shared {
            sorted.private_shared.push((n.clone(), auto));
        } else {
            sorted.private_unshared.push((n.clone(), auto));
        }
        Ok(())
    }

    /// The partition's one underlay network, which every firewall is placed into.
    fn underlay_of(&self, partition: &str) -> SimResult<Network> {
        let underlays: Vec<&Network> = self
            .networks
            .values()
            .filter(|n| n.underlay && n.partitionid == partition)
            .collect();
        match underlays[..] {
            [underlay] => Ok(underlay.clone()),
            _ => Err(SimError::unprocessable(format!(
                "partition {partition} needs exactly one underlay network, it has {}",
                underlays.len()
            ))),
        }
    }
}

/// Exactly one primary private network: the unshared one (shared ones become secondary, for
/// firewalls only), else one shared network; external networks follow.
fn primary_plan(mut sorted: Requested, role: &str) -> SimResult<Vec<PlannedNetwork>> {
    let (unshared, shared) = (sorted.private_unshared.len(), sorted.private_shared.len());
    if unshared + shared == 0 {
        return Err(SimError::unprocessable("no private network given"));
    }
    if role == ROLE_MACHINE && unshared + shared > 1 {
        return Err(SimError::unprocessable(
            "machines are not allowed to be placed into multiple private networks",
        ));
    }
    if unshared > 1 || (unshared == 0 && shared > 1) {
        return Err(SimError::unprocessable(
            "multiple private networks are specified but there must be only one primary private network that must not be shared",
        ));
    }
    let mut plan = Vec::new();
    if let Some((n, auto)) = sorted.private_unshared.pop() {
        plan.push((n, machine_network_type::PRIVATE_PRIMARY_UNSHARED, auto));
        for (n, auto) in sorted.private_shared {
            plan.push((n, machine_network_type::PRIVATE_SECONDARY_SHARED, auto));
        }
    } else if let Some((n, auto)) = sorted.private_shared.pop() {
        plan.push((n, machine_network_type::PRIVATE_PRIMARY_SHARED, auto));
    }
    for (n, auto) in sorted.external {
        plan.push((n, machine_network_type::EXTERNAL, auto));
    }
    Ok(plan)
}
