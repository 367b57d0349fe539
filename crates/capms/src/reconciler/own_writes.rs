//! Which objects capms has just written to, so that a reconcile does not act on the watch
//! cache's copy from before that write.
//!
//! A reconcile reads its object from the watch cache. When capms writes to the object (a
//! finalizer, spec.providerID, its status) and something else wakes the object before the
//! watch brings that write back (its MetalStackCluster, its Cluster), the next reconcile sees
//! the old copy: it adds the finalizer again (refused, as the write is guarded by the version it
//! read) or writes the same status again. Under load that wasted a round trip, in the middle of
//! an allocation, for 6 to 10 % of the machines at 200. Such a reconcile now waits for the
//! watch, whose copy includes the write and brings the object back at once; it loses nothing,
//! since a reconcile reads everything else anew.

use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a written object's older copy is held back at most. The watch normally brings the
/// write within milliseconds, but on a saturated apiserver it brought capms's writes back 10 to
/// 20 s late (1,000 replicas released at once): a shorter limit had those machines named again
/// every few seconds from the same copy. The limit only matters when a write changed nothing
/// (the apiserver then keeps the version and sends no event), which happens when an older copy
/// is written again while the write before it is on its way back, so a newer copy follows
/// anyway.
pub(crate) const HOLD: Duration = Duration::from_secs(30);

/// How often a held copy looks again whether the watch has brought a newer one. The watch's
/// copy of a status write wakes nothing (a controller ignores its own status), so a copy held
/// until the end of [`HOLD`] waited that long even after the watch had caught up: at 5 × 40,
/// a machine polled while the watch still lagged behind its provisioning status reported ready
/// 30 s after it phoned home, and those few set the time to all ready. A look at a held copy
/// reads nothing and writes nothing.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The objects written lately, by uid: the resourceVersion each had when capms wrote to it.
#[derive(Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, (String, Instant)>>,
}

impl OwnWrites {
    /// Notes that capms wrote to `obj`, read at its current resourceVersion.
    pub fn wrote<K: Resource>(&self, obj: &K) {
        let (Some(uid), Some(version)) = (obj.uid(), obj.resource_version()) else {
            return;
        };
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        // Entries of objects the watch has since brought back are gone already; what is
        // older than HOLD (an object deleted meanwhile) goes here, so the map stays small.
        written.retain(|_, (_, at)| at.elapsed() < HOLD);
        written.insert(uid, (version, Instant::now()));
    }

    /// How long to wait before looking at `obj` again, when it is the copy from before capms's
    /// latest write to it (at most [`RECHECK`]); None once the watch has brought a newer one
    /// (or HOLD passed).
    pub(crate) fn hold_back<K: Resource>(&self, obj: &K) -> Option<Duration> {
        let uid = obj.uid()?;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let (version, at) = written.get(&uid)?;
        let left = HOLD.saturating_sub(at.elapsed());
        if Some(version.as_str()) == obj.resource_version().as_deref() && !left.is_zero() {
            return Some(left.min(RECHECK));
        }
        written.remove(&uid);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn object(uid: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_copy_read_before_a_write_is_held_back_until_a_newer_one_comes() {
        let writes = OwnWrites::default();
        let read = object("a", "7");
        assert_eq!(writes.hold_back(&read), None, "nothing written yet");
        writes.wrote(&read);
        let wait = writes.hold_back(&read).expect("the old copy waits");
        assert_eq!(
            wait, RECHECK,
            "and looks again soon: the watch's copy of a status write wakes nothing"
        );
        assert_eq!(
            writes.hold_back(&object("b", "7")),
            None,
            "other objects go on"
        );
        assert_eq!(
            writes.hold_back(&object("a", "8")),
            None,
            "the watch's copy goes on"
        );
        assert_eq!(writes.hold_back(&read), None, "and ends the hold");
    }

    /// Makes the entry of `uid` as old as a hold lasts.
    fn age_past_hold(writes: &OwnWrites, uid: &str) {
        let mut written = writes.written.lock().expect("lock");
        written.get_mut(uid).expect("entry").1 -= HOLD;
    }

    #[test]
    fn a_hold_ends_after_its_limit_and_old_entries_go() {
        let writes = OwnWrites::default();
        let read = object("a", "7");
        writes.wrote(&read);
        age_past_hold(&writes, "a");
        assert_eq!(
            writes.hold_back(&read),
            None,
            "a write that changed nothing"
        );
        writes.wrote(&read);
        age_past_hold(&writes, "a");
        writes.wrote(&object("b", "1"));
        let left: Vec<_> = writes
            .written
            .lock()
            .expect("lock")
            .keys()
            .cloned()
            .collect();
        assert_eq!(left, ["b"]);
    }

    #[test]
    fn objects_without_uid_or_version_are_never_held() {
        let writes = OwnWrites::default();
        let bare = ConfigMap::default();
        writes.wrote(&bare);
        assert_eq!(writes.hold_back(&bare), None);
    }
}
