//! The machines capms hands to Cluster API at once: a window over the MetalStackMachines it has
//! reported provisioned whose Machine has not yet taken them up (copied their spec.providerID).
//!
//! Why: each MetalStackMachine reported provisioned sets Cluster API's Machine controller to
//! several writes on its Machine (conditions, providerID, status), each guarded by the version
//! its cache holds. When a MachineSet's forty replicas were handed over within a second on a
//! busy apiserver, Cluster API's cache fell seconds behind, its guarded writes were refused
//! 409 Conflict over and over, and its first write for the last of them came 6 to 9 s after
//! capms's. A replica beyond the window waits, unwritten, until Cluster API has taken up an
//! earlier one: capms hands over at the pace Cluster API keeps, whatever the machine's speed.
//! A handoff Cluster API has not taken up after [`HANDOFF_TIMEOUT`] leaves the window, so a
//! Machine controller that is down or stuck slows capms to `window` machines per timeout but
//! never stops it.

use kube::runtime::reflector::ObjectRef;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a handoff holds its place in the window at most.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// A MetalStackMachine's key, and its Machine's.
pub type Key = ObjectRef<crate::api::MetalStackMachine>;
pub type MachineKey = ObjectRef<crate::capi::Machine>;

/// May a MetalStackMachine be reported provisioned now?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Yes: it holds a place in the window (or there is no window).
    Admitted,
    /// No: the window is full. It is woken when Cluster API takes up an earlier machine, and
    /// looks again after [`HANDOFF_TIMEOUT`] at the latest.
    Waiting,
}

/// The window (see the module's documentation). Zero places: no window.
pub struct Handoffs {
    places: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Handed over and not yet taken up: each one's Machine and when it took its place.
    in_flight: HashMap<Key, (MachineKey, Instant)>,
    /// Turned away, in the order they asked: the next to wake, each with its Machine.
    waiting: VecDeque<(Key, MachineKey)>,
}

impl Handoffs {
    pub fn new(places: usize) -> Handoffs {
        Handoffs {
            places,
            state: Mutex::default(),
        }
    }

    /// Asks for `msm`'s place, whose Machine is `machine`, at `now`.
    pub fn admit(&self, msm: &Key, machine: &MachineKey, now: Instant) -> Handoff {
        if self.places == 0 {
            return Handoff::Admitted;
        }
        let mut state = self.lock();
        state
            .in_flight
            .retain(|_, (_, since)| now.saturating_duration_since(*since) < HANDOFF_TIMEOUT);
        if state.in_flight.contains_key(msm) || state.in_flight.len() < self.places {
            state.waiting.retain(|(w, _)| w != msm);
            state.in_flight.insert(msm.clone(), (machine.clone(), now));
            return Handoff::Admitted;
        }
        if !state.waiting.iter().any(|(w, _)| w == msm) {
            state.waiting.push_back((msm.clone(), machine.clone()));
        }
        Handoff::Waiting
    }

    /// Cluster API took up `machine`'s infrastructure at `now`: its place is free. The
    /// MetalStackMachines to wake, the first turned away, one for each free place, which each
    /// place is kept for.
    pub fn taken_up(&self, machine: &MachineKey, now: Instant) -> Vec<Key> {
        if self.places == 0 {
            return Vec::new();
        }
        let mut state = self.lock();
        state.in_flight.retain(|_, (m, _)| m != machine);
        let free = self.places.saturating_sub(state.in_flight.len());
        let woken = state.waiting.len().min(free);
        let woken: Vec<_> = state.waiting.drain(..woken).collect();
        for (msm, machine) in &woken {
            state.in_flight.insert(msm.clone(), (machine.clone(), now));
        }
        woken.into_iter().map(|(msm, _)| msm).collect()
    }

    /// A poisoned lock holds a consistent state: every change above is a single call.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msm(n: usize) -> Key {
        ObjectRef::new(&format!("msm-{n}")).within("ns")
    }

    fn machine(n: usize) -> MachineKey {
        ObjectRef::new(&format!("machine-{n}")).within("ns")
    }

    #[test]
    fn the_window_admits_its_places_and_turns_the_rest_away_in_order() {
        let window = Handoffs::new(2);
        let now = Instant::now();
        assert_eq!(window.admit(&msm(0), &machine(0), now), Handoff::Admitted);
        assert_eq!(window.admit(&msm(1), &machine(1), now), Handoff::Admitted);
        assert_eq!(window.admit(&msm(2), &machine(2), now), Handoff::Waiting);
        assert_eq!(window.admit(&msm(3), &machine(3), now), Handoff::Waiting);
        assert_eq!(window.admit(&msm(2), &machine(2), now), Handoff::Waiting);
        // A handoff in flight asks again (its status write after its naming): admitted.
        assert_eq!(window.admit(&msm(0), &machine(0), now), Handoff::Admitted);
        // Cluster API takes up one: the first turned away is woken, once.
        assert_eq!(window.taken_up(&machine(0), now), vec![msm(2)]);
        assert_eq!(window.taken_up(&machine(0), now), Vec::<Key>::new());
        assert_eq!(window.admit(&msm(2), &machine(2), now), Handoff::Admitted);
        assert_eq!(window.admit(&msm(3), &machine(3), now), Handoff::Waiting);
        assert_eq!(window.taken_up(&machine(1), now), vec![msm(3)]);
        assert_eq!(window.taken_up(&machine(2), now), Vec::<Key>::new());
    }

    #[test]
    fn a_handoff_never_taken_up_leaves_the_window_after_the_timeout() {
        let window = Handoffs::new(1);
        let now = Instant::now();
        assert_eq!(window.admit(&msm(0), &machine(0), now), Handoff::Admitted);
        let soon = now + HANDOFF_TIMEOUT - Duration::from_millis(1);
        assert_eq!(window.admit(&msm(1), &machine(1), soon), Handoff::Waiting);
        let later = now + HANDOFF_TIMEOUT;
        assert_eq!(window.admit(&msm(1), &machine(1), later), Handoff::Admitted);
        // The expired one asks again: it waits its turn like any other.
        assert_eq!(window.admit(&msm(0), &machine(0), later), Handoff::Waiting);
    }

    #[test]
    fn without_places_there_is_no_window() {
        let window = Handoffs::new(0);
        let now = Instant::now();
        for n in 0..100 {
            assert_eq!(window.admit(&msm(n), &machine(n), now), Handoff::Admitted);
        }
        assert!(window.taken_up(&machine(0), now).is_empty());
    }
}
