//! When an object is looked at again without an event: the growing wait while it polls
//! metal-api, and the jittered intervals of booting machines.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How often a booting machine is looked at. Each look reads its cluster's shared listing (at
/// most about one metal-api find per cluster per second while machines boot), and each new
/// listing wakes the objects whose machine changed stage, so a machine reports ready when any
/// look of its cluster sees it phone home, not only at its own next poll.
pub(crate) const BOOTING_POLL: Duration = Duration::from_secs(2);

/// How often a booting object that others wait for is looked at: a cluster's firewall, whose
/// readiness provisions the cluster and so lets its machines allocate. Just over the age a
/// booting look accepts ([`crate::cache::listings::BOOTING_MAX_AGE`]), even its lowest jitter,
/// so each look of a lone firewall lists its cluster anew and it is seen phoning home within
/// about a second (at [`BOOTING_POLL`], about two), for one find per cluster per look.
pub(crate) const GATE_POLL: Duration = Duration::from_millis(1300);

/// How far a booting poll strays from its interval, as a fraction of it.
pub(crate) const JITTER: f64 = 0.2;

/// `base` ± [`JITTER`], at random, so that a cluster's machines do not poll in step.
pub(crate) fn jittered(base: Duration) -> Duration {
    base.mul_f64(rand::random_range(1.0 - JITTER..1.0 + JITTER))
}

/// The bounded, growing poll interval after `attempt` unsuccessful polls: 2 s, 4 s, 8 s, 16 s,
/// then 30 s.
pub(crate) fn poll_interval(attempt: u32) -> Duration {
    Duration::from_secs((1u64 << attempt.clamp(1, 5)).min(30))
}

/// Each object's count of unsuccessful polls, by uid.
#[derive(Default)]
pub struct Backoff {
    polls: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// The next wait of the object with `key` while it polls metal-api for progress.
    pub(crate) fn next_poll(&self, key: &str) -> Duration {
        let mut polls = self.polls.lock().unwrap_or_else(|p| p.into_inner());
        let n = polls.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        poll_interval(*n)
    }

    /// Progress (or the end of the object): the wait starts over.
    pub fn reset(&self, key: &str) {
        self.polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_interval_grows_and_is_bounded() {
        let waits: Vec<u64> = (0..8).map(|n| poll_interval(n).as_secs()).collect();
        assert_eq!(waits, [2, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn backoff_grows_per_object_and_starts_over() {
        let backoff = Backoff::default();
        assert_eq!(backoff.next_poll("a"), Duration::from_secs(2));
        assert_eq!(backoff.next_poll("a"), Duration::from_secs(4));
        assert_eq!(backoff.next_poll("b"), Duration::from_secs(2));
        backoff.reset("a");
        assert_eq!(backoff.next_poll("a"), Duration::from_secs(2));
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        for _ in 0..1000 {
            let wait = jittered(BOOTING_POLL);
            assert!(wait >= BOOTING_POLL.mul_f64(1.0 - JITTER), "{wait:?}");
            assert!(wait <= BOOTING_POLL.mul_f64(1.0 + JITTER), "{wait:?}");
        }
    }
}
