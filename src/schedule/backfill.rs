//! `kahuna backfill`: one job for every run date of a range.

use anyhow::{Result, bail};
use chrono::NaiveDate;

use super::config::Job;
use super::{Scheduler, plan};

impl Scheduler<'_> {
    /// `kahuna backfill`: the job for every date in [from, to], oldest first; or, dry, the plan.
    pub async fn backfill(
        &self,
        job: &Job,
        from: NaiveDate,
        to: NaiveDate,
        dry_run: bool,
        out: &mut dyn std::io::Write,
    ) -> Result<()> {
        if to < from {
            bail!("--to {to} is before --from {from}");
        }
        let mut failed = 0;
        for date in from.iter_days().take_while(|d| *d <= to) {
            let (start, end) = plan::day_window(date, job.schedule.zone)?;
            if dry_run {
                writeln!(
                    out,
                    "{} for {date}: window [{}, {}), would replace its partition",
                    job.name,
                    start.to_rfc3339(),
                    end.to_rfc3339()
                )?;
                continue;
            }
            match self.run_with_retries(job, date, None, "backfill").await {
                Ok(rows) => writeln!(out, "{} for {date}: {rows} rows", job.name)?,
                Err(e) => {
                    failed += 1;
                    writeln!(out, "{} for {date}: failed: {e:#}", job.name)?;
                }
            }
        }
        self.runner.batch_done();
        if failed > 0 {
            bail!("{failed} of the dates failed (see schedule_runs)");
        }
        Ok(())
    }
}
