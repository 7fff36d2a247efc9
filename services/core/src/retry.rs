//! How failures are classified and how often a call is tried.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the caller does next with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// Worth trying again (rate limits, 5xx, timeouts, peer errors).
    Transient,
    /// Trying again gives the same answer (bad token, bad parameters, budget).
    Permanent,
}

/// The hard ceiling on attempts per call, whatever a job asks for.
pub const MAX_ATTEMPTS_CEILING: u32 = 10;

/// How one tool call is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1..=10).
    pub max_attempts: u32,
    /// The first backoff delay; each next one doubles, with jitter.
    pub base_delay: Duration,
    /// No single wait is longer, `Retry-After` included.
    pub max_delay: Duration,
}

impl RetryPolicy {
    pub fn new(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts: max_attempts.clamp(1, MAX_ATTEMPTS_CEILING),
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
        }
    }

    pub fn with_delays(mut self, base: Duration, max: Duration) -> RetryPolicy {
        self.base_delay = base;
        self.max_delay = max.max(base);
        self
    }

    /// Whether an error on attempt `attempt` (1-based) leads to another attempt.
    pub fn should_retry(&self, class: ErrorClass, attempt: u32) -> bool {
        class == ErrorClass::Transient && attempt < self.max_attempts
    }

    /// The wait before the next attempt when the upstream asked for `retry_after`:
    /// its value, capped by `max_delay`; otherwise the backoff's own delay.
    pub fn wait(&self, backoff: Duration, retry_after: Option<Duration>) -> Duration {
        retry_after.unwrap_or(backoff).min(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_capped_at_the_ceiling() {
        assert_eq!(RetryPolicy::new(50).max_attempts, 10);
        assert_eq!(RetryPolicy::new(0).max_attempts, 1);
    }

    #[test]
    fn only_transient_errors_retry_and_only_below_the_cap() {
        let p = RetryPolicy::new(3);
        assert!(p.should_retry(ErrorClass::Transient, 1));
        assert!(p.should_retry(ErrorClass::Transient, 2));
        assert!(!p.should_retry(ErrorClass::Transient, 3));
        assert!(!p.should_retry(ErrorClass::Permanent, 1));
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        let p = RetryPolicy::new(3).with_delays(Duration::from_millis(100), Duration::from_secs(5));
        assert_eq!(
            p.wait(Duration::from_millis(100), Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            p.wait(Duration::from_millis(100), Some(Duration::from_secs(600))),
            Duration::from_secs(5)
        );
        assert_eq!(
            p.wait(Duration::from_millis(300), None),
            Duration::from_millis(300)
        );
    }
}
