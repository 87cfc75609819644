//! A smooth rate limiter: a schedule of due times, at most 10 ms of credit.

use std::time::{Duration, Instant};

/// Lets `rate` units per second through, spread evenly: `take(n)` waits until
/// the n units are due. A limiter that fell behind (a slow target) keeps at
/// most 10 ms of credit, so it never bursts to catch up.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    rate: f64,
    /// The time at which the next unit is due.
    due: Instant,
    burst: Duration,
}

impl RateLimiter {
    /// `rate` in units per second (> 0).
    pub fn new(rate: f64) -> Self {
        RateLimiter {
            rate,
            due: Instant::now(),
            burst: Duration::from_millis(10),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// How many units to take at once so that each step is about 10 ms of
    /// traffic, between 1 and `max`.
    pub fn step(rate: f64, max: usize) -> usize {
        ((rate / 100.0) as usize).clamp(1, max.max(1))
    }

    /// Waits until `n` more units may go. Returns false (without waiting) if
    /// that time is past `deadline`.
    pub fn take(&mut self, n: u64, deadline: Option<Instant>) -> bool {
        let now = Instant::now();
        if self.due + self.burst < now {
            self.due = now - self.burst;
        }
        let start = self.due;
        self.due += Duration::from_secs_f64(n as f64 / self.rate);
        if let Some(d) = deadline {
            if start > d {
                return false;
            }
        }
        // The n units are sent when the first of them is due; the schedule
        // carries the rest, so the average is exact.
        if start > now {
            std::thread::sleep(start - now);
        }
        true
    }
}
