//! metal-apiserver's verdicts on pairs of a size and an image (its size image constraints,
//! `SizeImageConstraintService/Try`), kept a while per catalog: machines of a pair asked about
//! once cost no further call for five minutes. (Cluster API's replicas of a template are not
//! sent to admission at all; their template was.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict is kept: a constraint an operator changes is heeded after this.
const KEPT: Duration = Duration::from_secs(300);

/// What metal-apiserver says of machines of a size with an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Refused, in metal-apiserver's words.
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
