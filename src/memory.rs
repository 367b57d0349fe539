//! How the allocator (mimalloc, installed by the binary) gives memory back.

/// mimalloc's `mi_option_purge_delay`: milliseconds before freed pages go back to the system.
/// libmimalloc-sys names most options but not this one; its place in mimalloc v3's option list
/// is checked by a test against the option's documented default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages are kept before they go back to the system (mimalloc v3: 1 s).
const PURGE_AFTER_MS: std::os::raw::c_long = 100;

/// Freed memory goes back to the system after 100 ms instead of mimalloc's default second.
/// capms's allocations come in bursts (each watch event and metal-api listing is decoded into
/// many short-lived strings), and pages held after a burst count in its RSS. Purging sooner
/// costs CPU, as the next burst faults the pages in again. In `make bench` at 1,000 machines:
/// purging at once took the peak from about 71.5 to 67.9 MiB; with 10 ms the runs used 15.4 and
/// 16.1 CPU seconds, against 13.1 to 14.9 with the default (runs vary by about 1.5 s); with
/// 100 ms, 14.3.
pub fn release_freed_memory_promptly() {
    // SAFETY: setting an option is allowed at any time and only changes when pages are purged.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_AFTER_MS) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_purge_delay_option_is_where_mimalloc_v3_keeps_it() {
        // SAFETY: reading an option has no side effects beyond initialising it from the
        // environment.
        let default = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        // mimalloc v3's default purge delay is 1000 ms (unless this test's environment sets it).
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(default, 1000);
        }
    }
}
