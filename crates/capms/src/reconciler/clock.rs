//! How long things have waited, by the apiserver's times and capms's clock, which may be a
//! little behind.

use kube::Resource;
use std::time::Duration;

/// How long `obj` has existed at `now`; None without a creation time, or when `now` lies before
/// it.
pub fn age<K: Resource>(obj: &K, now: jiff::Timestamp) -> Option<Duration> {
    let created = obj.meta().creation_timestamp.as_ref()?.0;
    elapsed(created, now, Duration::ZERO)
}

/// How long before `now` `then` was. capms's clock may be a little behind the apiserver's, so
/// that an object seems created in the future: less than `skew` ahead counts as now, more as
/// no known time.
pub fn elapsed(then: jiff::Timestamp, now: jiff::Timestamp, skew: Duration) -> Option<Duration> {
    let since = now.duration_since(then);
    match Duration::try_from(since) {
        Ok(elapsed) => Some(elapsed),
        Err(_) if since.unsigned_abs() < skew => Some(Duration::ZERO),
        Err(_) => None,
    }
}
