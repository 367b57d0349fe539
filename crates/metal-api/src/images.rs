//! metal-api's image name resolution: `<os>-<version>`, where a version with patch 0 or no patch
//! selects the newest image of that OS with the same major.minor (`~X.Y.0`), and a patch > 0
//! selects exactly that version.

use std::cmp::Ordering;

/// A leniently parsed semantic version (`20.04` is 20.4.0, as Masterminds semver reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Version {
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let mut next = |required: bool| -> Option<u64> {
            match parts.next() {
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok(),
                None if !required => Some(0),
                _ => None,
            }
        };
        let version = Version {
            major: next(true)?,
            minor: next(false)?,
            patch: next(false)?,
        };
        parts.next().is_none().then_some(version)
    }
}

/// An image id's OS and version as written: the last `-` separates them.
pub fn split_id(id: &str) -> Option<(&str, &str)> {
    id.rsplit_once('-').filter(|(os, _)| !os.is_empty())
}

/// Splits an image id into OS and parsed version.
pub fn os_and_version(id: &str) -> Option<(&str, Version)> {
    let (os, version) = split_id(id)?;
    Some((os, Version::parse(version)?))
}

/// Does an image with `candidate_id` satisfy the request `requested`?
pub fn matches(requested: &str, candidate_id: &str) -> bool {
    let (Some((os, want)), Some((cand_os, have))) =
        (os_and_version(requested), os_and_version(candidate_id))
    else {
        return false;
    };
    if os != cand_os {
        return false;
    }
    if want.patch > 0 {
        have == want
    } else {
        have.major == want.major && have.minor == want.minor
    }
}

/// Why a name does not resolve, worded as metal-api words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("NotFound no image for id:{requested} found:image version {requested} is not parsable")]
    Unparsable { requested: String },
    #[error(
        "NotFound no image for id:{requested} found:no image for os:{os} version:{version} found"
    )]
    NoMatch {
        requested: String,
        os: String,
        version: String,
    },
}

/// Picks the image a request resolves to among `ids`: the highest matching version of the same
/// OS.
pub fn resolve<'a, I>(requested: &str, ids: I) -> Result<&'a str, ResolveError>
where
    I: IntoIterator<Item = &'a str>,
{
    let Some((os, version)) = os_and_version(requested) else {
        return Err(ResolveError::Unparsable {
            requested: requested.to_owned(),
        });
    };
    ids.into_iter()
        .filter(|id| matches(requested, id))
        .max_by(|a, b| {
            let va = os_and_version(a).map(|(_, v)| v);
            let vb = os_and_version(b).map(|(_, v)| v);
            va.cmp(&vb)
                .then_with(|| a.cmp(b).reverse())
                .then(Ordering::Equal)
        })
        .ok_or_else(|| ResolveError::NoMatch {
            requested: requested.to_owned(),
            os: os.to_owned(),
            version: format!("{}.{}.{}", version.major, version.minor, version.patch),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 6] = [
        "ubuntu-20.04.20200824",
        "ubuntu-20.04.20201126",
        "ubuntu-20.10.20210101",
        "firewall-ubuntu-2.0.20200331",
        "firewall-ubuntu-2.0.20201126",
        "ubuntu-cloud-init-20.04",
    ];

    #[test]
    fn splits_on_the_last_dash() {
        let (os, v) = os_and_version("firewall-ubuntu-3.0").expect("parses");
        assert_eq!(
            (os, v),
            (
                "firewall-ubuntu",
                Version {
                    major: 3,
                    minor: 0,
                    patch: 0
                }
            )
        );
        let (os, v) = os_and_version("ubuntu-20.04.20201126").expect("parses");
        assert_eq!(
            (os, v),
            (
                "ubuntu",
                Version {
                    major: 20,
                    minor: 4,
                    patch: 20201126
                }
            )
        );
        assert_eq!(os_and_version("ubuntu"), None);
        assert_eq!(os_and_version("ubuntu-latest"), None);
        assert_eq!(os_and_version("-1.0"), None);
    }

    #[test]
    fn patch_zero_takes_the_newest_of_the_minor() {
        assert_eq!(resolve("ubuntu-20.04", IDS), Ok("ubuntu-20.04.20201126"));
        assert_eq!(
            resolve("ubuntu-20.4", IDS),
            Ok("ubuntu-20.04.20201126"),
            "leading zeros are lenient"
        );
        assert_eq!(
            resolve("firewall-ubuntu-2.0", IDS),
            Ok("firewall-ubuntu-2.0.20201126")
        );
        assert_eq!(resolve("ubuntu-20.10", IDS), Ok("ubuntu-20.10.20210101"));
        assert_eq!(
            resolve("ubuntu-cloud-init-20.04", IDS),
            Ok("ubuntu-cloud-init-20.04")
        );
    }

    #[test]
    fn patch_above_zero_is_exact() {
        assert_eq!(
            resolve("ubuntu-20.04.20200824", IDS),
            Ok("ubuntu-20.04.20200824")
        );
        assert!(matches!(
            resolve("ubuntu-20.04.20200825", IDS),
            Err(ResolveError::NoMatch { .. })
        ));
    }

    #[test]
    fn other_os_or_minor_does_not_match() {
        let err = resolve("ubuntu-22.04", IDS).expect_err("no 22.04");
        assert_eq!(
            err.to_string(),
            "NotFound no image for id:ubuntu-22.04 found:no image for os:ubuntu version:22.4.0 found"
        );
        assert!(
            !matches("ubuntu-2.0", "firewall-ubuntu-2.0.20201126"),
            "OS must match exactly"
        );
        assert!(matches!(
            resolve("ubuntu", IDS),
            Err(ResolveError::Unparsable { .. })
        ));
    }
}
