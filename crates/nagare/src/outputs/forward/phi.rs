//! The phi accrual failure detector of the forward output's heartbeats
//! (Hayashibara et al.; Fluentd's `phi_threshold` and `hard_timeout`).
//!
//! Each answered heartbeat is an arrival. The detector keeps the last
//! [`WINDOW`] inter-arrival times and models them as an exponential
//! distribution (as Fluentd and Cassandra do), whose upper tail is
//! `exp(-t / mean)`, so `phi(t) = -log10(1 - CDF(t)) = t / mean · log10(e)`:
//! with heartbeats answered every interval, phi passes 16 (the default
//! threshold) after about 37 intervals of silence, and a network that
//! answers slowly or unevenly raises the mean and so the patience. Every
//! function takes the time as an argument, so tests drive the clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Inter-arrival times kept (Fluentd keeps 1000 weighted; 100 follow a
/// change of the network's pace within a couple of minutes at 1 s).
pub const WINDOW: usize = 100;

#[derive(Debug)]
pub struct Phi {
    /// Seconds between consecutive arrivals, oldest first.
    gaps: VecDeque<f64>,
    /// The last arrival (or the start, or the moment the window was reset).
    last: Instant,
    /// The heartbeat interval, in seconds: the first gap of a fresh window,
    /// so one arrival is enough to judge the next silence.
    interval: f64,
}

impl Phi {
    pub fn new(interval: Duration, now: Instant) -> Phi {
        let interval = interval.as_secs_f64().max(1e-3);
        Phi {
            gaps: VecDeque::from([interval]),
            last: now,
            interval,
        }
    }

    /// A heartbeat was answered at `now`.
    pub fn arrive(&mut self, now: Instant) {
        let gap = if self.gaps.is_empty() {
            self.interval
        } else {
            now.saturating_duration_since(self.last).as_secs_f64()
        };
        if self.gaps.len() == WINDOW {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
        self.last = now;
    }

    /// Forgets the history (the server went down): the pace of heartbeats
    /// before an outage says nothing about the one after it.
    pub fn reset(&mut self, now: Instant) {
        self.gaps.clear();
        self.last = now;
    }

    /// How long since the last arrival.
    pub fn silence(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last)
    }

    /// The suspicion level at `now`: 0 right after an arrival, growing
    /// linearly with the silence; 0 with no history.
    pub fn phi(&self, now: Instant) -> f64 {
        if self.gaps.is_empty() {
            return 0.0;
        }
        let mean = (self.gaps.iter().sum::<f64>() / self.gaps.len() as f64).max(1e-3);
        self.silence(now).as_secs_f64() / mean * std::f64::consts::LOG10_E
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::LOG10_E;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn phi_grows_with_silence_relative_to_the_usual_gap() {
        let t0 = Instant::now();
        let mut p = Phi::new(secs(1.0), t0);
        for i in 1..=10 {
            p.arrive(t0 + secs(i as f64));
        }
        let last = t0 + secs(10.0);
        assert_eq!(p.phi(last), 0.0);
        // One usual gap of silence: log10(e) ≈ 0.434.
        assert!((p.phi(last + secs(1.0)) - LOG10_E).abs() < 1e-3);
        // The default threshold 16 is crossed after ≈ 36.8 s of silence.
        assert!(p.phi(last + secs(36.0)) < 16.0);
        assert!(p.phi(last + secs(37.0)) > 16.0);
        // An arrival brings phi back to 0.
        p.arrive(last + secs(40.0));
        assert_eq!(p.phi(last + secs(40.0)), 0.0);
    }

    #[test]
    fn a_slower_network_makes_the_detector_more_patient() {
        let t0 = Instant::now();
        let (mut fast, mut slow) = (Phi::new(secs(1.0), t0), Phi::new(secs(1.0), t0));
        let mut t = 0.0;
        for i in 1..=WINDOW {
            fast.arrive(t0 + secs(i as f64));
            // Answers come every 1 s or 5 s: mean about 3 s.
            t += if i % 2 == 0 { 1.0 } else { 5.0 };
            slow.arrive(t0 + secs(t));
        }
        let f = fast.phi(t0 + secs(WINDOW as f64 + 6.0));
        let s = slow.phi(t0 + secs(t + 6.0));
        assert!((f - 6.0 * LOG10_E).abs() < 0.01, "{f}");
        assert!((s - 2.0 * LOG10_E).abs() < 0.05, "{s}");
    }

    #[test]
    fn the_window_keeps_the_last_gaps_only() {
        let t0 = Instant::now();
        let mut p = Phi::new(secs(10.0), t0);
        // 10 s gaps first, then a long run of 1 s gaps pushes them out.
        let mut t = 0.0;
        for _ in 0..50 {
            t += 10.0;
            p.arrive(t0 + secs(t));
        }
        for _ in 0..WINDOW {
            t += 1.0;
            p.arrive(t0 + secs(t));
        }
        assert!((p.phi(t0 + secs(t + 1.0)) - LOG10_E).abs() < 1e-3);
    }

    #[test]
    fn after_a_reset_one_arrival_judges_by_the_interval() {
        let t0 = Instant::now();
        let mut p = Phi::new(secs(2.0), t0);
        p.reset(t0 + secs(100.0));
        assert_eq!(p.phi(t0 + secs(500.0)), 0.0, "no history: no suspicion");
        assert_eq!(p.silence(t0 + secs(500.0)), secs(400.0));
        p.arrive(t0 + secs(501.0));
        // The first gap of the new window is the interval (2 s), not the outage.
        assert!((p.phi(t0 + secs(505.0)) - 2.0 * LOG10_E).abs() < 1e-3);
    }
}
