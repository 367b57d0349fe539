//! Size image constraints: which images machines of a size take, as metal-api checks them at
//! allocation and in `SizeImageConstraintService/Try`. A constraint names, per image OS, a
//! version range in Masterminds semver's notation, of which the simulator reads comparisons
//! (`>=`, `>`, `<=`, `<`, `=`, `!=`; a bare version is `=`), joined by `,` or spaces (all must
//! hold) and by `||` (one of the groups must hold).

use super::*;
use metal_api::images::Version;
use std::cmp::Ordering;

/// One comparison of a constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Comparison {
    operator: &'static str,
    version: Version,
    /// The version as written, as metal-api prints it back.
    written: String,
}

impl Comparison {
    fn holds(&self, version: Version) -> bool {
        let order = version.cmp(&self.version);
        match self.operator {
            ">=" => order != Ordering::Less,
            ">" => order == Ordering::Greater,
            "<=" => order != Ordering::Greater,
            "<" => order == Ordering::Less,
            "!=" => order != Ordering::Equal,
            _ => order == Ordering::Equal,
        }
    }
}

/// A constraint's groups of comparisons: one group must hold in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionConstraint {
    text: String,
    groups: Vec<Vec<Comparison>>,
}

impl VersionConstraint {
    pub fn parse(text: &str) -> Result<VersionConstraint, String> {
        let comparison = |term: &str| {
            let operator = [">=", "<=", "!=", ">", "<", "="]
                .into_iter()
                .find(|op| term.starts_with(op))
                .unwrap_or("=");
            let version = term.trim_start_matches(operator).trim();
            Version::parse(version)
                .map(|parsed| Comparison {
                    operator,
                    version: parsed,
                    written: version.to_owned(),
                })
                .ok_or_else(|| format!("{version:?} in {text:?} is not a version"))
        };
        let group = |group: &str| -> Result<Vec<Comparison>, String> {
            // `>= 22.04, < 24` and `>=22.04 <24`: an operator may stand apart from its version.
            let glued = [">=", "<=", "!=", ">", "<", "="]
                .iter()
                .fold(group.replace(',', " "), |g, op| {
                    g.replace(&format!("{op} "), op)
                });
            let terms: Vec<_> = glued.split_whitespace().map(comparison).collect();
            if terms.is_empty() {
                return Err(format!("{text:?} has an empty constraint"));
            }
            terms.into_iter().collect()
        };
        let groups = text.split("||").map(group).collect::<Result<_, _>>()?;
        Ok(VersionConstraint {
            text: text.to_owned(),
            groups,
        })
    }

    pub fn allows(&self, version: Version) -> bool {
        self.groups
            .iter()
            .any(|g| g.iter().all(|c| c.holds(version)))
    }

    /// As metal-api prints it: each operator joined to its version.
    fn printed(&self) -> String {
        let group = |g: &Vec<Comparison>| {
            let terms = g.iter().map(|c| format!("{}{}", c.operator, c.written));
            terms.collect::<Vec<_>>().join(" ")
        };
        let groups: Vec<_> = self.groups.iter().map(group).collect();
        groups.join(" || ")
    }
}

impl State {
    /// Why machines of size `size` may not take the image `requested` resolves to, in metal-api's
    /// words; None when they may. An unknown size or image, or one of an OS the size does not
    /// restrict, is not refused here.
    pub fn size_image_refusal(&self, size: &str, requested: &str) -> Option<String> {
        let constraints = self.size_image_constraints.get(size)?;
        let image = self.image_latest(requested).ok()?;
        let (os, version) = images::os_and_version(&image.id)?;
        let constraint = constraints.get(os)?;
        (!constraint.allows(version)).then(|| {
            format!(
                "given size:{size} with image:{} does violate image constraint:{os} {}",
                image.id,
                constraint.printed()
            )
        })
    }

    pub(super) fn load_size_image_constraints(&mut self, inv: &Inventory) -> Result<(), String> {
        for c in &inv.sizeimageconstraints {
            if !self.sizes.contains_key(&c.id) {
                return Err(format!("size image constraint of unknown size {}", c.id));
            }
            let mut by_os = BTreeMap::new();
            for (os, text) in &c.images {
                let parsed = VersionConstraint::parse(text)
                    .map_err(|e| format!("size image constraint {}: {e}", c.id))?;
                by_os.insert(os.clone(), parsed);
            }
            self.size_image_constraints.insert(c.id.clone(), by_os);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(constraint: &str, version: &str) -> bool {
        let c = VersionConstraint::parse(constraint).expect("a constraint");
        c.allows(Version::parse(version).expect("a version"))
    }

    #[test]
    fn comparisons_hold_as_masterminds_semver_reads_them() {
        assert!(allows(">= 22.04", "22.4.0"));
        assert!(allows(">=22.04", "24.04.20250101"));
        assert!(!allows(">= 22.04", "20.04.20201126"));
        assert!(allows(">= 20.04, < 22", "20.04.20201126"));
        assert!(!allows(">= 20.04 < 22", "22.0.1"));
        assert!(allows("< 20 || >= 22", "19.10"));
        assert!(!allows("< 20 || >= 22", "21.0"));
        assert!(allows("22.04", "22.4.0"));
        assert!(!allows("!= 22.04", "22.4"));
        assert!(!allows("> 22.04", "22.4"));
        assert!(allows("<= 22.04", "22.4"));
        assert!(VersionConstraint::parse(">= twenty").is_err());
        assert!(VersionConstraint::parse(" || ").is_err());
    }

    /// Seed 000's state, whose size takes no Ubuntu before 22.04.
    fn constrained() -> State {
        let mut inventory = Inventory::seed000();
        inventory
            .sizeimageconstraints
            .push(crate::inventory::SizeImageConstraintSpec {
                id: "v1-small-x86".into(),
                images: [("ubuntu".to_owned(), ">= 22.04".to_owned())].into(),
            });
        State::from_inventory(&inventory).expect("a state")
    }

    #[test]
    fn a_size_refuses_only_images_of_a_restricted_os_outside_its_range() {
        let state = constrained();
        assert_eq!(
            state
                .size_image_refusal("v1-small-x86", "ubuntu-20.04")
                .as_deref(),
            Some(
                "given size:v1-small-x86 with image:ubuntu-20.04.20201126 does violate image constraint:ubuntu >=22.04"
            )
        );
        assert_eq!(
            state.size_image_refusal("v1-small-x86", "ubuntu-cloud-init-20.04"),
            None
        );
        assert_eq!(state.size_image_refusal("v1-small-x86", "nope-1.0"), None);
        assert_eq!(state.size_image_refusal("other", "ubuntu-20.04"), None);
    }

    #[test]
    fn allocation_through_v1_refuses_a_violation_as_unprocessable() {
        let mut state = constrained();
        let request = MachineAllocateRequest {
            projectid: "00000000-0000-0000-0000-000000000000".into(),
            partitionid: "vagrant".into(),
            sizeid: "v1-small-x86".into(),
            imageid: "ubuntu-20.04".into(),
            networks: Some(vec![AllocationNetwork {
                networkid: "internet-vagrant-lab".into(),
                autoacquire: None,
            }]),
            ..Default::default()
        };
        let refused = state.machine_allocate(&request, None, ROLE_MACHINE, "test");
        let refused = refused.expect_err("a violation");
        assert_eq!(refused.status, 422);
        assert!(
            refused
                .message
                .contains("does violate image constraint:ubuntu >=22.04")
        );
    }
}
