//! When jobs run: cron occurrences in a zone, the run date and window each occurrence stands
//! for, and which missed occurrences a restarted scheduler catches up. Pure functions of the
//! times given, so the tests drive them with any clock.

use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// What a restarted scheduler does with the occurrences it missed while it was down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Skip them; the next occurrence runs as usual.
    None,
    /// Run the newest one only (a nightly report: only last night matters).
    Latest,
    /// Run every one, oldest first (a table that must have every date).
    All,
}

/// At most this many missed occurrences are run by `all`, so a cron of every second after a
/// month down does not start millions of runs; the rest are left to `kahuna backfill`.
pub const MAX_CATCH_UP: usize = 1000;

/// A cron expression (5 fields, or 6 with seconds first) read in a zone.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub expression: String,
    cron: Cron,
    pub zone: Tz,
}

impl Schedule {
    pub fn parse(expression: &str, zone: Tz) -> Result<Schedule> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| anyhow!("cron expression `{expression}`: {e}"))?;
        Ok(Schedule { expression: expression.to_string(), cron, zone })
    }

    /// Occurrences in (after, until], oldest first, at most `limit`. Wall-clock times that a
    /// daylight-saving change skips or repeats are croner's to settle: each occurrence once.
    pub fn between(&self, after: DateTime<Utc>, until: DateTime<Utc>, limit: usize) -> Vec<DateTime<Utc>> {
        self.cron
            .iter_after(after.with_timezone(&self.zone))
            .map(|t| t.with_timezone(&Utc))
            .take_while(|t| *t <= until)
            .take(limit)
            .collect()
    }

    /// The newest occurrence in (after, until], however many come before it.
    pub fn latest_between(&self, after: DateTime<Utc>, until: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let latest = self.cron.find_previous_occurrence(&until.with_timezone(&self.zone), true).ok()?;
        Some(latest.with_timezone(&Utc)).filter(|t| *t > after)
    }

    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.iter_after(after.with_timezone(&self.zone)).next().map(|t| t.with_timezone(&Utc))
    }

    /// The run date an occurrence stands for: its local date, `days_back` days earlier (a run
    /// at 02:00 with `days_back = 1` diagnoses yesterday).
    pub fn run_date(&self, occurrence: DateTime<Utc>, days_back: u32) -> NaiveDate {
        let local = occurrence.with_timezone(&self.zone).date_naive();
        local.checked_sub_days(Days::new(u64::from(days_back))).unwrap_or(local)
    }
}

/// The UTC window of one local day: [midnight, next midnight). On a day that starts in a
/// daylight-saving gap the window starts at the first instant that exists.
pub fn day_window(date: NaiveDate, zone: Tz) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
    let start_of = |d: NaiveDate| -> Result<DateTime<Utc>> {
        let midnight = d.and_hms_opt(0, 0, 0).ok_or_else(|| anyhow!("{d}: no midnight"))?;
        // A gap at midnight (some zones move clocks at 00:00): the first hour that exists.
        for hour in 0..3 {
            let wall = midnight + chrono::Duration::hours(hour);
            if let Some(t) = zone.from_local_datetime(&wall).earliest() {
                return Ok(t.with_timezone(&Utc));
            }
        }
        bail!("{d} has no start of day in {zone}")
    };
    let next = date.succ_opt().ok_or_else(|| anyhow!("{date}: no next day"))?;
    Ok((start_of(date)?, start_of(next)?))
}

/// The occurrences to run now, oldest first. `handled` is the newest occurrence the ledger says
/// was dealt with (succeeded, or failed after every retry); `started` is when this scheduler
/// started. Occurrences up to `started` were missed while it was down and are caught up as
/// `policy` says; later ones are due as usual. A job the ledger has never seen starts fresh.
pub fn due(
    schedule: &Schedule,
    handled: Option<DateTime<Utc>>,
    started: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: CatchUp,
) -> Vec<(DateTime<Utc>, bool)> {
    let mut runs = Vec::new();
    if let Some(handled) = handled.filter(|h| *h < started) {
        let chosen: Vec<DateTime<Utc>> = match policy {
            CatchUp::None => Vec::new(),
            CatchUp::Latest => schedule.latest_between(handled, started).into_iter().collect(),
            CatchUp::All => schedule.between(handled, started, MAX_CATCH_UP),
        };
        runs.extend(chosen.into_iter().map(|t| (t, true)));
    }
    runs.extend(schedule.between(live_after(handled, started), now, MAX_CATCH_UP).into_iter().map(|t| (t, false)));
    runs
}

/// After what a job's occurrences are due in the ordinary way: the newest it dealt with, or
/// this scheduler's start, whichever is later (earlier ones are [`due`]'s catch-up).
pub fn live_after(handled: Option<DateTime<Utc>>, started: DateTime<Utc>) -> DateTime<Utc> {
    handled.map_or(started, |h| h.max(started))
}

/// The wait before retry `attempt` (1 for the first retry): `base` doubled each time, capped.
pub fn backoff(base: std::time::Duration, attempt: u32, cap: std::time::Duration) -> std::time::Duration {
    base.saturating_mul(1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn occurrences_follow_the_zone_across_daylight_saving() {
        let paris = Schedule::parse("0 30 2 * * *", chrono_tz::Europe::Paris).unwrap();
        // 2024-03-31: Paris skips 02:00–03:00, so 02:30 does not exist that night.
        let runs = paris.between(utc("2024-03-29T12:00:00Z"), utc("2024-04-02T12:00:00Z"), 10);
        let shown: Vec<String> = runs.iter().map(|t| t.to_rfc3339()).collect();
        assert_eq!(shown[0], "2024-03-30T01:30:00+00:00", "{shown:?}");
        assert_eq!(shown.last().map(String::as_str), Some("2024-04-02T00:30:00+00:00"), "{shown:?}");
        assert!(runs.windows(2).all(|w| w[0] < w[1]));
        // Nightly at 02:00 UTC with the five-field form; run date = yesterday.
        let utc_nightly = Schedule::parse("0 2 * * *", Tz::UTC).unwrap();
        let first = utc_nightly.next_after(utc("2008-08-23T17:00:00Z")).unwrap();
        assert_eq!(first, utc("2008-08-24T02:00:00Z"));
        assert_eq!(utc_nightly.run_date(first, 1).to_string(), "2008-08-23");
        assert!(Schedule::parse("61 * * * *", Tz::UTC).is_err());
    }

    #[test]
    fn a_local_day_is_23_24_or_25_hours() {
        let (from, to) = day_window(NaiveDate::from_ymd_opt(2024, 3, 31).unwrap(), chrono_tz::Europe::Paris).unwrap();
        assert_eq!((from, to), (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z")));
        let (from, to) = day_window(NaiveDate::from_ymd_opt(2024, 10, 27).unwrap(), chrono_tz::Europe::Paris).unwrap();
        assert_eq!(to - from, chrono::Duration::hours(25));
        let (from, _) = day_window(NaiveDate::from_ymd_opt(2008, 8, 23).unwrap(), Tz::UTC).unwrap();
        assert_eq!(from, utc("2008-08-23T00:00:00Z"));
    }

    #[test]
    fn catch_up_after_three_nights_down() {
        let nightly = Schedule::parse("0 2 * * *", Tz::UTC).unwrap();
        let handled = Some(utc("2024-01-01T02:00:00Z"));
        let started = utc("2024-01-04T09:00:00Z"); // missed the 2nd, 3rd and 4th
        let now = started;
        let times = |runs: Vec<(DateTime<Utc>, bool)>| runs.iter().map(|(t, c)| (t.day(), *c)).collect::<Vec<_>>();
        use chrono::Datelike;
        assert_eq!(times(due(&nightly, handled, started, now, CatchUp::None)), vec![]);
        assert_eq!(times(due(&nightly, handled, started, now, CatchUp::Latest)), vec![(4, true)]);
        assert_eq!(times(due(&nightly, handled, started, now, CatchUp::All)), vec![(2, true), (3, true), (4, true)]);
        // Once running, the next night is due in the ordinary way, whatever the policy.
        let later = utc("2024-01-05T02:00:00Z");
        let handled = Some(utc("2024-01-04T02:00:00Z"));
        assert_eq!(times(due(&nightly, handled, started, later, CatchUp::None)), vec![(5, false)]);
        // A job never run before starts with the next occurrence, not with history.
        assert_eq!(times(due(&nightly, None, started, later, CatchUp::All)), vec![(5, false)]);
        // `latest` is the newest missed occurrence even past the cap on `all` (7,200 seconds).
        let every_second = Schedule::parse("* * * * * *", Tz::UTC).unwrap();
        let (handled, started) = (utc("2024-01-04T07:00:00Z"), utc("2024-01-04T09:00:00Z"));
        assert_eq!(due(&every_second, Some(handled), started, started, CatchUp::Latest), vec![(started, true)]);
        assert_eq!(due(&every_second, Some(handled), started, started, CatchUp::All).len(), MAX_CATCH_UP);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let s = std::time::Duration::from_secs;
        let waits: Vec<u64> = (1..=6).map(|a| backoff(s(60), a, s(600)).as_secs()).collect();
        assert_eq!(waits, vec![60, 120, 240, 480, 600, 600]);
        assert_eq!(backoff(s(60), 40, s(600)), s(600));
    }
}
