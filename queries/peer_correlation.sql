-- The Kahuna M45 study: are a job's nodes alike? (Kahuna §IV)
--
-- For every job, each host's number of Maps executing over the job's life is sampled at
-- $points evenly spaced instants (a job of 10 minutes at 600 points is Maps per second; one
-- grid length for all jobs keeps a months-long study in bounded memory). Every pair of hosts
-- of the job gets |Pearson r| of their series; a host is *similar* when |r| >= $min_r with
-- every peer. The paper found 89% of nodes similar in successful jobs and 43% in failed ones.
--
-- Statement 2 prints that split by job outcome (from `jobs`; UNKNOWN where the job history was
-- not ingested); statement 3 is the per-job table, saved as `peer_correlation_jobs` (one
-- partition per cluster and run date) for charting.
--
-- @param from       timestamp = null   jobs whose Maps start at or after this time (null: all history)
-- @param to         timestamp = null   ... and before this time
-- @param cluster    text      = null   cluster (null: every cluster)
-- @param min_r      number    = 0.6    |r| a host needs with every peer to count as similar
-- @param points     integer   = 120    samples of each job's Maps-executing series
-- @param min_hosts  integer   = 2      jobs on fewer hosts are left out
-- @output table peer_correlation_jobs
--
-- Output (statement 2): outcome, jobs, hosts, similar_hosts, share_similar.
-- Output (statement 3): cluster, job_id, outcome, hosts, similar_hosts, share_similar,
-- mean_abs_r, least_similar_host, its lowest |r|.

-- Statement 1: each job's similarity. Each host's Maps-executing series per job, on a grid of
-- $points over the job's span, and every host pair of the job compared
-- (`concurrency_peer_pearson`: the series are made one job at a time, each pair compared once;
-- the rows of one Map attempt are one interval, from its first start to its last end). A
-- constant series (r undefined) is not similar to anything: its lowest |r| is 0.
CREATE TABLE job_similarity AS
WITH map_states AS (
    SELECT cluster, job_id, host, task_id, daemon, start_ts, end_ts
    FROM states
    WHERE state = 'Map' AND job_id IS NOT NULL AND host IS NOT NULL AND start_ts IS NOT NULL
      AND ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
),
-- A Map is there twice when the job history was ingested beside the TaskTracker logs
-- (daemon 'history' and 'tasktracker'): a job's Maps come from its logs, from its history
-- only where no log of the job was ingested (the comparison of a job's logged Maps is NULL
-- where it has none).
compared AS (
    SELECT cluster, job_id, unnest(coalesce(logged, history)) AS r
    FROM (SELECT cluster, job_id,
                 concurrency_peer_pearson(host, date_part('epoch', start_ts), date_part('epoch', end_ts), $points, task_id)
                     FILTER (WHERE daemon <> 'history') AS logged,
                 concurrency_peer_pearson(host, date_part('epoch', start_ts), date_part('epoch', end_ts), $points, task_id)
                     FILTER (WHERE daemon = 'history') AS history
          FROM map_states GROUP BY cluster, job_id)
),
peer_hosts AS (
    SELECT cluster, job_id, r['member'] AS host, r['lowest_abs_r'] AS lowest_r, r['mean_abs_r'] AS mean_r
    FROM compared
),
-- Each job's hosts summed up where the comparison left them (its rows are already divided
-- among partitions by job), and only then the job's outcome joined: one row per job.
similarity AS (
    SELECT cluster, job_id,
           count(*) AS hosts, sum(CASE WHEN lowest_r >= $min_r THEN 1 ELSE 0 END) AS similar_hosts,
           avg(CASE WHEN lowest_r >= $min_r THEN 1.0 ELSE 0.0 END) AS share_similar,
           avg(mean_r) AS mean_abs_r,
           first_value(host ORDER BY lowest_r, host) AS least_similar_host,
           min(lowest_r) AS least_similar_r
    FROM peer_hosts GROUP BY cluster, job_id
    HAVING count(*) >= $min_hosts
),
-- One outcome per job: a job's history can be ingested twice (Hadoop writes it to the
-- JobTracker's history folder and to the job's output, `_logs/history`); the last to finish.
outcomes AS (
    SELECT cluster, job_id, first_value(outcome ORDER BY finish_ts DESC NULLS LAST, outcome) AS outcome
    FROM jobs GROUP BY cluster, job_id
)
SELECT s.cluster, s.job_id, coalesce(j.outcome, 'UNKNOWN') AS outcome, s.hosts, s.similar_hosts, s.share_similar,
       s.mean_abs_r, s.least_similar_host, s.least_similar_r
FROM similarity s LEFT JOIN outcomes j ON j.cluster = s.cluster AND j.job_id = s.job_id;

SELECT outcome, count(*) AS jobs, sum(hosts) AS hosts, sum(similar_hosts) AS similar_hosts,
       round(CAST(sum(similar_hosts) AS DOUBLE) / sum(hosts), 3) AS share_similar
FROM job_similarity GROUP BY outcome ORDER BY outcome;

SELECT * FROM job_similarity ORDER BY cluster, job_id;
