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
        Self::starting_at(rate, Instant::now())
    }

    /// A limiter whose first unit is due at `start`.
    pub fn starting_at(rate: f64, start: Instant) -> Self {
        RateLimiter {
            rate,
            due: start,
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
    /// they are due at or past `deadline`.
    pub fn take(&mut self, n: u64, deadline: Option<Instant>) -> bool {
        let now = Instant::now();
        match self.schedule(n, now, deadline) {
            Some(at) => {
                if at > now {
                    std::thread::sleep(at - now);
                }
                true
            }
            None => false,
        }
    }

    /// The pacing decision behind [`RateLimiter::take`], on a clock the
    /// caller gives: books `n` more units at `now` and returns when they may
    /// go, or None if they are due at or past `deadline` (so a run of length
    /// d at rate r lets exactly r × d units through).
    pub fn schedule(&mut self, n: u64, now: Instant, deadline: Option<Instant>) -> Option<Instant> {
        if self.due + self.burst < now {
            self.due = now - self.burst;
        }
        let start = self.due;
        self.due += Duration::from_secs_f64(n as f64 / self.rate);
        if deadline.is_some_and(|d| start >= d) {
            return None;
        }
        // The n units are sent when the first of them is due; the schedule
        // carries the rest, so the average is exact.
        Some(start.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A worker's loop as `gen` runs it (stop at the deadline, take a step,
    /// send when allowed) on a clock where sending takes no time. Returns the
    /// send times, relative to `t0`.
    fn run(rate: f64, step: u64, duration: Duration) -> Vec<Duration> {
        let t0 = Instant::now();
        let deadline = t0 + duration;
        let mut l = RateLimiter::starting_at(rate, t0);
        let mut now = t0;
        let mut sends = Vec::new();
        while now < deadline {
            match l.schedule(step, now, Some(deadline)) {
                Some(at) => {
                    now = at;
                    sends.push(at - t0);
                }
                None => break,
            }
        }
        sends
    }

    #[test]
    fn a_prompt_sender_gets_exactly_the_rate_in_even_steps() {
        // 20,000 units/s in steps of 200 for 3 s: one step every 10 ms.
        let sends = run(20_000.0, 200, Duration::from_secs(3));
        assert_eq!(sends.len() * 200, 60_000);
        for (i, at) in sends.iter().enumerate() {
            assert_eq!(*at, 10 * MS * i as u32, "step {i}");
        }
    }

    #[test]
    fn workers_sharing_a_rate_add_up_to_it() {
        // gen splits 20,000/s between 2 workers, each with its own step.
        let rate = 20_000.0 / 2.0;
        let step = RateLimiter::step(rate, 4096) as u64;
        let total: u64 = (0..2)
            .map(|_| run(rate, step, Duration::from_millis(1500)).len() as u64 * step)
            .sum();
        assert_eq!(total, 30_000);
    }

    #[test]
    fn a_step_bigger_than_the_pace_is_sent_at_once_and_paid_for_after() {
        let t0 = Instant::now();
        let mut l = RateLimiter::starting_at(100.0, t0);
        assert_eq!(l.schedule(50, t0, None), Some(t0));
        // 50 units at 100/s: the next ones are due half a second later.
        assert_eq!(l.schedule(1, t0, None), Some(t0 + 500 * MS));
        assert_eq!(l.schedule(1, t0, None), Some(t0 + 510 * MS));
    }

    #[test]
    fn a_sender_that_fell_behind_gets_at_most_10_ms_of_credit() {
        // 1,000 units/s in steps of 10 (10 ms each); the target stalls for 1 s.
        let t0 = Instant::now();
        let mut l = RateLimiter::starting_at(1000.0, t0);
        assert_eq!(l.schedule(10, t0, None), Some(t0));
        let late = t0 + Duration::from_secs(1);
        // A second's worth (1,000 units) is not made up: one step of credit
        // (10 ms) and the step due now go at once, then the pace resumes.
        assert_eq!(l.schedule(10, late, None), Some(late));
        assert_eq!(l.schedule(10, late, None), Some(late));
        assert_eq!(l.schedule(10, late, None), Some(late + 10 * MS));
        assert_eq!(l.schedule(10, late, None), Some(late + 20 * MS));
    }

    #[test]
    fn nothing_is_let_through_past_the_deadline() {
        let t0 = Instant::now();
        let mut l = RateLimiter::starting_at(10.0, t0);
        let deadline = Some(t0 + 150 * MS);
        assert_eq!(l.schedule(1, t0, deadline), Some(t0));
        assert_eq!(l.schedule(1, t0, deadline), Some(t0 + 100 * MS));
        assert_eq!(l.schedule(1, t0, deadline), None, "due at 200 ms");
        // A unit due at the deadline itself is outside the run.
        let mut l = RateLimiter::starting_at(10.0, t0);
        let deadline = Some(t0 + 100 * MS);
        assert_eq!(l.schedule(1, t0, deadline), Some(t0));
        assert_eq!(l.schedule(1, t0, deadline), None, "due at 100 ms");
    }
}
