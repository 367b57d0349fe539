//! Verdicts on pairs of a size and an image (metal-api's size image constraints). Through v1
//! they follow from the constraints the catalog reads whole. metal-apiserver's
//! (`SizeImageConstraintService/Try`) are kept a while per catalog: machines of a pair asked
//! about once cost no further call for five minutes. (Cluster API's replicas of a template are
//! not sent to admission at all; their template was.)

use metal_api::size_images::SizeImageConstraint;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict is kept: a constraint an operator changes is heeded after this.
const KEPT: Duration = Duration::from_secs(300);

/// What metal-api says of machines of a size with an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Refused, in metal-api's words.
    Refused(String),
    /// It could not be asked (why); nothing is kept.
    Unknown(String),
}

/// What `SizeImageConstraintService/Try` answered means for admission: a refusal of the request
/// as given (an invalid pair, an unknown size or image) is the pair's verdict; any other failure
/// says nothing about the pair.
pub(crate) fn verdict_of(answer: Result<(), metal_api::Error>) -> Verdict {
    use metal_api::error::Category;
    match answer {
        Ok(()) => Verdict::Allowed,
        Err(e) if matches!(e.category(), Category::Rejected | Category::NotFound) => {
            Verdict::Refused(e.to_string())
        }
        Err(e) => Verdict::Unknown(e.to_string()),
    }
}

/// What `constraints` (metal-api's, read through v1) say of machines of `size` taking `image`
/// (a full id): refused in metal-api's words when the size's range for the image's OS leaves the
/// image out.
pub(crate) fn verdict_in(constraints: &[SizeImageConstraint], size: &str, image: &str) -> Verdict {
    let of_size = constraints.iter().find(|c| c.id == size);
    match of_size.and_then(|c| c.refusal(image)) {
        Some(refusal) => Verdict::Refused(refusal),
        None => Verdict::Allowed,
    }
}

/// The verdicts of one metal-api, by size and image.
#[derive(Default)]
pub(crate) struct Verdicts {
    kept: Mutex<HashMap<(String, String), (Instant, Verdict)>>,
}

impl Verdicts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Instant, Verdict)>> {
        // Each entry is written at once: a panic elsewhere leaves the map whole.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The verdict on `size` with `image` given at or after `now - KEPT`.
    pub(crate) fn kept(&self, size: &str, image: &str, now: Instant) -> Option<Verdict> {
        let key = (size.to_owned(), image.to_owned());
        let kept = self.lock();
        let (at, verdict) = kept.get(&key)?;
        (now.saturating_duration_since(*at) < KEPT).then(|| verdict.clone())
    }

    /// Keeps `verdict` on `size` with `image` as of `now`, unless it is unknown; drops the
    /// expired ones.
    pub(crate) fn keep(&self, size: &str, image: &str, verdict: &Verdict, now: Instant) {
        if matches!(verdict, Verdict::Unknown(_)) {
            return;
        }
        let mut kept = self.lock();
        kept.retain(|_, (at, _)| now.saturating_duration_since(*at) < KEPT);
        kept.insert((size.to_owned(), image.to_owned()), (now, verdict.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(status: u16) -> metal_api::Error {
        metal_api::Error::Api {
            endpoint: "size_image_try",
            status,
            message: "given size:s with image:i does violate image constraint:i >=2".into(),
        }
    }

    #[test]
    fn a_refusal_or_unknown_pair_is_a_verdict_and_other_failures_are_not() {
        assert_eq!(verdict_of(Ok(())), Verdict::Allowed);
        for status in [400, 422, 404] {
            let verdict = verdict_of(Err(api_error(status)));
            assert!(matches!(verdict, Verdict::Refused(ref m) if m.contains("violate")));
        }
        for status in [401, 429, 500, 503] {
            let verdict = verdict_of(Err(api_error(status)));
            assert!(
                matches!(verdict, Verdict::Unknown(_)),
                "{status}: {verdict:?}"
            );
        }
    }

    #[test]
    fn through_v1_the_size_s_range_for_the_image_s_os_judges_it() {
        let constraint = |size: &str, os: &str, range: &str| SizeImageConstraint {
            id: size.into(),
            constraints: metal_api::size_images::SizeImageConstraintBase {
                images: [(os.to_owned(), range.to_owned())].into(),
            },
            ..Default::default()
        };
        let constraints = [
            constraint("small", "ubuntu", ">= 22.04"),
            constraint("large", "debian", "< 12"),
        ];
        let verdict = |size: &str, image: &str| verdict_in(&constraints, size, image);
        assert_eq!(
            verdict("small", "ubuntu-20.04.20201126"),
            Verdict::Refused(
                "given size:small with image:ubuntu-20.04.20201126 does violate image constraint:ubuntu >=22.04".into()
            )
        );
        assert_eq!(verdict("small", "ubuntu-24.04.20250101"), Verdict::Allowed);
        assert_eq!(verdict("small", "debian-13.0"), Verdict::Allowed);
        assert_eq!(verdict("large", "ubuntu-20.04.20201126"), Verdict::Allowed);
        assert_eq!(verdict("large", "debian-11.0"), Verdict::Allowed);
        assert!(matches!(
            verdict("large", "debian-13.0"),
            Verdict::Refused(_)
        ));
        assert_eq!(verdict("other", "debian-11.0"), Verdict::Allowed);
        assert_eq!(
            verdict_in(&[], "small", "ubuntu-20.04.20201126"),
            Verdict::Allowed
        );
    }

    #[test]
    fn verdicts_are_kept_for_a_while_and_unknown_ones_never() {
        let verdicts = Verdicts::default();
        let t0 = Instant::now();
        let refused = Verdict::Refused("no".into());
        verdicts.keep("s", "i", &refused, t0);
        verdicts.keep("s", "j", &Verdict::Unknown("down".into()), t0);
        assert_eq!(verdicts.kept("s", "i", t0 + KEPT / 2), Some(refused));
        assert_eq!(verdicts.kept("s", "j", t0), None);
        assert_eq!(verdicts.kept("t", "i", t0), None);
        assert_eq!(verdicts.kept("s", "i", t0 + KEPT), None);
    }
}
