//! metal-apiserver's rate limit: requests per token per minute of the hour, counted before the
//! request is served. As there, a request is refused when the count already exceeds the limit,
//! so `limit + 1` requests pass in a minute.

use super::connect::{Code, ConnectError};
use std::collections::HashMap;

/// The counts of the current minute, by token.
#[derive(Default)]
pub struct RateCounts {
    minute: i64,
    counts: HashMap<String, u32>,
}

impl RateCounts {
    /// Counts a request of token `uuid` in minute `minute` (minutes since the epoch), or refuses
    /// it over `limit` (0: no limit).
    pub fn count(&mut self, uuid: &str, minute: i64, limit: u32) -> Result<(), ConnectError> {
        if limit == 0 {
            return Ok(());
        }
        if minute != self.minute {
            self.minute = minute;
            self.counts.clear();
        }
        let count = self.counts.entry(uuid.to_owned()).or_default();
        if *count > limit {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!("you have reached the per-minute API rate limit (limit: {limit})"),
            ));
        }
        *count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_plus_one_requests_pass_per_token_and_minute() {
        let mut counts = RateCounts::default();
        for _ in 0..4 {
            counts.count("a", 7, 3).expect("within the limit");
        }
        let refused = counts.count("a", 7, 3).expect_err("over the limit");
        assert_eq!(refused.code, Code::ResourceExhausted);
        assert_eq!(
            refused.message,
            "you have reached the per-minute API rate limit (limit: 3)"
        );
        counts.count("b", 7, 3).expect("another token counts apart");
        counts.count("a", 8, 3).expect("a new minute");
        for _ in 0..10 {
            counts.count("a", 8, 0).expect("no limit");
        }
    }
}
