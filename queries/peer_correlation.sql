-- The Kahuna M45 study: are a job's nodes alike? (Kahuna §IV)
--
-- For every job, each host's number of Maps executing over the job's life is sampled at
-- $points evenly spaced instants (a job of 10 minutes at 600 points is Maps per second; one
-- grid length for all jobs keeps a months-long study in bounded memory). Every pair of hosts
-- of the job gets |Pearson r| of their series; a host is *similar* when |r| >= $min_r with
-- every peer. The paper found 89% of nodes similar in successful jobs and 43% in failed ones.
--
-- Statement 4 prints that split by job outcome (from `jobs`; UNKNOWN where the job history was
-- not ingested); statement 5 is the per-job table, saved as `peer_correlation_jobs` (one
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
-- Output (statement 4): outcome, jobs, hosts, similar_hosts, share_similar.
-- Output (statement 5): cluster, job_id, outcome, hosts, similar_hosts, share_similar,
-- mean_abs_r, least_similar_host, its lowest |r|.

-- Statement 1: each Map's start and end, in seconds (a table of this run's session: its hosts
-- and its Maps are both read below, and a CTE would be computed for each).
CREATE TABLE peer_maps AS
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
-- only where no log of the job was ingested.
logged AS (
    SELECT DISTINCT cluster, job_id FROM map_states WHERE daemon <> 'history'
)
SELECT m.cluster, m.job_id, m.host, m.task_id,
       min(date_part('epoch', m.start_ts)) AS s, max(date_part('epoch', m.end_ts)) AS e
FROM map_states m LEFT JOIN logged l ON l.cluster = m.cluster AND l.job_id = m.job_id
WHERE m.daemon <> 'history' OR l.job_id IS NULL
GROUP BY m.cluster, m.job_id, m.host, m.task_id;

-- Statement 2: each host's Maps-executing series per job, on a grid of $points over the job's
-- span, and every host pair of the job compared (`concurrency_peer_pearson`: the series are
-- made one job at a time, each pair compared once). Hosts go in as integer keys. A table, so
-- that the unnested rows are ranked by their own values below.
CREATE TABLE peer_hosts AS
WITH ids AS (
    SELECT host, CAST(row_number() OVER (ORDER BY host) AS BIGINT) AS id FROM (SELECT DISTINCT host FROM peer_maps) AS h
),
compared AS (
    SELECT m.cluster, m.job_id, unnest(concurrency_peer_pearson(i.id, m.s, m.e, $points)) AS r
    FROM peer_maps m JOIN ids i ON i.host = m.host
    GROUP BY m.cluster, m.job_id
)
SELECT c.cluster, c.job_id, i.host, c.r['lowest_abs_r'] AS lowest_r, c.r['mean_abs_r'] AS mean_r
FROM compared c JOIN ids i ON i.id = c.r['member'];

-- Statement 3: each job's similarity.
CREATE TABLE job_similarity AS
WITH ranked AS (
    -- A constant series (r undefined) is not similar to anything: it counts 0.
    SELECT cluster, job_id, host, lowest_r, mean_r, lowest_r >= $min_r AS similar,
           row_number() OVER (PARTITION BY cluster, job_id ORDER BY lowest_r, host) AS rank
    FROM peer_hosts
)
SELECT r.cluster, r.job_id, coalesce(j.outcome, 'UNKNOWN') AS outcome,
       count(*) AS hosts, sum(CASE WHEN r.similar THEN 1 ELSE 0 END) AS similar_hosts,
       avg(CASE WHEN r.similar THEN 1.0 ELSE 0.0 END) AS share_similar,
       avg(r.mean_r) AS mean_abs_r,
       max(CASE WHEN r.rank = 1 THEN r.host END) AS least_similar_host,
       min(r.lowest_r) AS least_similar_r
FROM ranked r LEFT JOIN jobs j ON j.cluster = r.cluster AND j.job_id = r.job_id
GROUP BY r.cluster, r.job_id, j.outcome
HAVING count(*) >= $min_hosts;

SELECT outcome, count(*) AS jobs, sum(hosts) AS hosts, sum(similar_hosts) AS similar_hosts,
       round(CAST(sum(similar_hosts) AS DOUBLE) / sum(hosts), 3) AS share_similar
FROM job_similarity GROUP BY outcome ORDER BY outcome;

SELECT * FROM job_similarity ORDER BY cluster, job_id;
