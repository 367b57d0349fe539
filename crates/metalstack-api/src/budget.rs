//! What one token may still ask this minute. metal-apiserver counts each token's requests per
//! minute and answers `resource_exhausted` past its limit (100 by default). The client keeps
//! under a budget of its own: it remembers when its calls of the last minute went out and sends
//! none past the budget, so that no minute, however the server cuts them, sees more. Should the
//! server refuse anyway (another user of the same token, a lower limit), the client stops asking
//! for a while that doubles with each refusal in a row, up to a minute.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window metal-apiserver counts in.
const MINUTE: Duration = Duration::from_secs(60);
/// The first pause after a refusal; each further refusal in a row doubles it, up to a minute.
const FIRST_PAUSE: Duration = Duration::from_secs(5);

/// A token's calls of the last minute, and a pause after a refusal.
#[derive(Debug)]
pub(crate) struct Budget {
    per_minute: usize,
    sent: VecDeque<Instant>,
    paused_until: Option<Instant>,
    pause: Duration,
}

impl Budget {
    pub(crate) fn new(per_minute: u32) -> Budget {
        Budget {
            per_minute: per_minute.max(1) as usize,
            sent: VecDeque::new(),
            paused_until: None,
            pause: FIRST_PAUSE,
        }
    }

    /// Takes one call at `now`, or says how long to wait before the next one may go out.
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if let Some(until) = self.paused_until {
            if now < until {
                return Err(until - now);
            }
            self.paused_until = None;
        }
        self.forget_before(now);
        if self.sent.len() >= self.per_minute {
            let oldest = self.sent.front().copied().unwrap_or(now);
            return Err(MINUTE.saturating_sub(now.duration_since(oldest)));
        }
        self.sent.push_back(now);
        Ok(())
    }

    /// The share of the budget that may still go out at `now` (0 to 1): none while paused.
    pub(crate) fn left(&mut self, now: Instant) -> f64 {
        if self.paused_until.is_some_and(|until| now < until) {
            return 0.0;
        }
        self.forget_before(now);
        let left = self.per_minute.saturating_sub(self.sent.len());
        left as f64 / self.per_minute as f64
    }

    /// Drops the calls that left a minute or more before `now`.
    fn forget_before(&mut self, now: Instant) {
        while self
            .sent
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            self.sent.pop_front();
        }
    }

    /// The server refused a call at `now` for the token's rate: pause, longer each time in a row.
    pub(crate) fn refused(&mut self, now: Instant) -> Duration {
        let pause = self.pause;
        self.paused_until = Some(now + pause);
        self.pause = (pause * 2).min(MINUTE);
        pause
    }

    /// The server answered a call: the next refusal pauses briefly again.
    pub(crate) fn answered(&mut self) {
        self.pause = FIRST_PAUSE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn no_minute_sees_more_calls_than_the_budget() {
        let start = Instant::now();
        let mut budget = Budget::new(3);
        for at in [0, 10, 20] {
            assert_eq!(budget.take(start + secs(at)), Ok(()));
        }
        assert_eq!(budget.take(start + secs(30)), Err(secs(30)), "the 4th");
        assert_eq!(budget.take(start + secs(59)), Err(secs(1)));
        assert_eq!(
            budget.take(start + secs(60)),
            Ok(()),
            "the first left the minute"
        );
        assert_eq!(budget.take(start + secs(61)), Err(secs(9)));
        // Every 60 s window holds at most 3 of the calls that went out.
        let sent: Vec<Instant> = budget.sent.iter().copied().collect();
        assert_eq!(sent, [start + secs(10), start + secs(20), start + secs(60)]);
    }

    #[test]
    fn a_refusal_pauses_every_call_longer_each_time_until_an_answer() {
        let start = Instant::now();
        let mut budget = Budget::new(100);
        assert_eq!(budget.refused(start), secs(5));
        assert_eq!(budget.take(start + secs(1)), Err(secs(4)));
        assert_eq!(budget.take(start + secs(5)), Ok(()));
        assert_eq!(budget.refused(start + secs(5)), secs(10));
        assert_eq!(budget.refused(start + secs(15)), secs(20));
        assert_eq!(budget.refused(start + secs(35)), secs(40));
        assert_eq!(
            budget.refused(start + secs(75)),
            secs(60),
            "at most a minute"
        );
        assert_eq!(budget.refused(start + secs(135)), secs(60));
        budget.answered();
        assert_eq!(budget.refused(start + secs(200)), secs(5));
    }

    #[test]
    fn what_is_left_counts_the_last_minute_and_nothing_while_paused() {
        let start = Instant::now();
        let mut budget = Budget::new(4);
        assert_eq!(budget.left(start), 1.0);
        for at in [0, 10, 20] {
            assert_eq!(budget.take(start + secs(at)), Ok(()));
        }
        assert_eq!(budget.left(start + secs(30)), 0.25);
        assert_eq!(
            budget.left(start + secs(65)),
            0.5,
            "the first left the minute"
        );
        budget.refused(start + secs(65));
        assert_eq!(budget.left(start + secs(66)), 0.0, "paused");
        assert_eq!(
            budget.left(start + secs(70)),
            0.75,
            "the pause over, the second gone"
        );
    }
}
