//! Time as the scheduler sees it. The real clock sleeps; the fake one, for tests, jumps to the
//! instant asked for, so days of schedule run in microseconds and every wake-up is exact.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[async_trait]
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Returns at `until` (at once if it has passed).
    async fn sleep_until(&self, until: DateTime<Utc>);
}

pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn sleep_until(&self, until: DateTime<Utc>) {
        // Sleep in slices of at most a minute: a suspended machine or a changed system clock
        // is noticed within a minute instead of at the end of a long sleep.
        loop {
            let left = until - Utc::now();
            let Ok(left) = left.to_std() else { return };
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(std::time::Duration::from_secs(60))).await;
        }
    }
}

/// A clock that only moves when slept on, recording every sleep.
pub struct FakeClock {
    now: Mutex<DateTime<Utc>>,
    sleeps: Mutex<Vec<DateTime<Utc>>>,
}

impl FakeClock {
    pub fn new(start: DateTime<Utc>) -> FakeClock {
        FakeClock { now: Mutex::new(start), sleeps: Mutex::new(Vec::new()) }
    }

    /// Every instant slept until, in order.
    pub fn sleeps(&self) -> Vec<DateTime<Utc>> {
        self.sleeps.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn set(&self, to: DateTime<Utc>) {
        if let Ok(mut now) = self.now.lock() {
            *now = to;
        }
    }
}

#[async_trait]
impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        self.now.lock().map(|n| *n).unwrap_or_default()
    }

    async fn sleep_until(&self, until: DateTime<Utc>) {
        if let Ok(mut sleeps) = self.sleeps.lock() {
            sleeps.push(until);
        }
        if let Ok(mut now) = self.now.lock() {
            *now = (*now).max(until);
        }
    }
}
