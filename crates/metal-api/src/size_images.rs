//! Size image constraints: which images machines of a size take, as metal-api checks them when
//! it allocates a machine (`/v1/size-image-constraint/try`, API v2's
//! `SizeImageConstraintService/Try`). A constraint names, per image OS, a version range in
//! Masterminds semver's notation, of which comparisons are read (`>=`, `>`, `<=`, `<`, `=`,
//! `!=`; a bare version is `=`), joined by `,` or spaces (all must hold) and by `||` (one of
//! the groups must hold).

use crate::images::{self, Version};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A size's constraints, as metal-api answers `GET /v1/size-image-constraint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SizeImageConstraint {
    /// The size's id.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub constraints: SizeImageConstraintBase,
}

/// Per image OS, the versions machines of the size take.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SizeImageConstraintBase {
    #[serde(default)]
    pub images: BTreeMap<String, String>,
}

/// `POST /v1/size-image-constraint/try`: may machines of `size` take `image` (in full or as
/// `<os>-<major>.<minor>`)?
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct SizeImageConstraintTryRequest {
    pub size: String,
    pub image: String,
}

impl SizeImageConstraint {
    /// Why machines of this size may not take `image` (a full image id), in metal-api's words;
    /// None when they may: an image of an OS the size does not restrict, or within its range.
    /// A range that does not parse refuses nothing here (metal-api refuses to store one).
    pub fn refusal(&self, image: &str) -> Option<String> {
        let (os, version) = images::os_and_version(image)?;
        let constraint = VersionConstraint::parse(self.constraints.images.get(os)?).ok()?;
        (!constraint.allows(version)).then(|| {
            format!(
                "given size:{} with image:{image} does violate image constraint:{os} {}",
                self.id,
                constraint.printed()
            )
        })
    }
}

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
        Ok(VersionConstraint { groups })
    }

    pub fn allows(&self, version: Version) -> bool {
        self.groups
            .iter()
            .any(|g| g.iter().all(|c| c.holds(version)))
    }

    /// As metal-api prints it: each operator joined to its version.
    pub fn printed(&self) -> String {
        let group = |g: &Vec<Comparison>| {
            let terms = g.iter().map(|c| format!("{}{}", c.operator, c.written));
            terms.collect::<Vec<_>>().join(" ")
        };
        let groups: Vec<_> = self.groups.iter().map(group).collect();
        groups.join(" || ")
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

    #[test]
    fn a_size_refuses_only_images_of_a_restricted_os_outside_its_range() {
        let constraint = SizeImageConstraint {
            id: "v1-small-x86".into(),
            constraints: SizeImageConstraintBase {
                images: [("ubuntu".to_owned(), ">= 22.04".to_owned())].into(),
            },
            ..Default::default()
        };
        assert_eq!(
            constraint.refusal("ubuntu-20.04.20201126").as_deref(),
            Some(
                "given size:v1-small-x86 with image:ubuntu-20.04.20201126 does violate image constraint:ubuntu >=22.04"
            )
        );
        assert_eq!(constraint.refusal("ubuntu-24.04.20250101"), None);
        assert_eq!(constraint.refusal("ubuntu-cloud-init-20.04.20201126"), None);
        assert_eq!(constraint.refusal("no-version"), None);
    }
}
