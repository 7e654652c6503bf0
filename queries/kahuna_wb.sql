-- Kahuna-WB: the host whose state durations differ from most of its peers (Kahuna §VI-A).
--
-- For each job and SALSA state (DataNode states, which carry no job, are compared over the
-- whole window), every host's durations become one histogram; a host is indicted in that job
-- when the square-root Jensen-Shannon distance of its histogram exceeds $threshold against
-- more than half of its peers (`indict`), and its states took longer than the peers' median
-- ($min_slowdown): a host faster than the rest is not what made the job slow.
--
-- Durations are divided by the peer group's median before binning, so one set of bins fits
-- Maps of seconds and Reduces of hours. Each state weighs its duration ($weight = 'time'): a
-- histogram says where the host's time went, so a single hung task among a handful (a 600 s
-- Map beside six of 12 s) holds most of the mass instead of a seventh of it; 'count' weighs
-- every state alike, as the paper did. Histograms are smoothed with a Gaussian kernel of
-- $bandwidth bins, so that a few percent of jitter between healthy hosts does not move mass
-- into a neighbouring bin. A state still running at the end of the data counts with the time
-- it has run so far, or until its attempt ended if it did (a killed reduce's copy in flight
-- logs no end).
--
-- Per host, over the window (job_id NULL, subject 'host'): each job that indicts anyone hands
-- out one unit of blame, shared by the hosts it indicts; the host is the verdict when it holds
-- at least $job_share of the blame of the window — a chronic fault (a hog) shows in most jobs,
-- a one-off hang in the one job it slowed, while chance indictments of healthy hosts scatter —
-- or when a DataNode state indicts it over the window. Shared, so that a job that indicts a
-- dozen hosts at once does not weigh as much for each of them as a job that names one: a hang
-- indicted alone in its job beside such a job holds half of the blame, each of the dozen 1/24.
-- So the verdict is not monotone in $threshold: a stricter one that indicts fewer hosts in a job
-- hands each of them more of the blame.
--
-- A copy of a map output that failed is left out: its duration is the copier's read timeout (a
-- setting, not the host's speed), so a stray failed try (30 s beside copies of 130 ms) would
-- hold most of its host's mass; `fetch_failures` reads the failures.
--
-- With the job history ingested beside the TaskTracker logs, every Map and Reduce is there
-- twice (daemon 'history' and 'tasktracker'); a job's states come from its logs, from the
-- history only for a job and state no log was ingested for.
--
-- @param from        timestamp = null   states starting at or after this time (null: all history)
-- @param to          timestamp = null   states starting before this time (null: no end)
-- @param cluster     text      = null   cluster to diagnose (null: every cluster, each on its own)
-- @param states      text      = 'Map,Reduce,ReduceCopy,ReduceMergeCopy,ReadBlock,WriteBlock'   states compared, comma-separated
-- @param threshold   number    = 0.5    distance above which two hosts' histograms differ
-- @param weight      text      = 'time' what a state weighs in its histogram: 'time' (its duration) or 'count' (1)
-- @param bins        integer   = 24     histogram bins (log-spaced)
-- @param lo          number    = 0.1    smallest duration binned, as a multiple of the peer median
-- @param hi          number    = 10     largest duration binned, as a multiple of the peer median
-- @param bandwidth   number    = 1      kernel smoothing of the histograms, in bins (0: none)
-- @param min_slowdown number   = 1      mean duration, as a multiple of the peer median, above which an odd host is indicted
-- @param min_states  integer   = 2      a host takes part with at least this many states in the group
-- @param min_hosts   integer   = 3      a group is compared only with at least this many hosts
-- @param job_share   number    = 0.5    share of the window's blame (jobs indicting anyone) that indicts the host
-- @output verdict
-- @tune threshold = 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7; not monotone
--
-- Output, per job and state: cluster, job_id (NULL for DataNode states), host, subject (the
-- state), score (the share of peers farther than $threshold), indicted, states (on this host),
-- peers, host_median_ms, peer_median_ms and slowdown (mean duration / peer median).
-- Per host (job_id NULL, subject 'host'): score (its share of the blame), indicted, jobs
-- (compared in), jobs_indicted.

-- Statement 1: the states of the window (a view: read where each statement needs them).
CREATE VIEW wb_scope AS
SELECT cluster, job_id, state, host, daemon, task_id, start_ts, end_ts, duration_ms
FROM states
WHERE ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
  AND array_has(string_to_array($states, ','), state)
  AND (state <> 'ReduceCopy' OR outcome IS DISTINCT FROM 'FAILED')
  AND host IS NOT NULL AND start_ts IS NOT NULL;

-- Statement 2: per job and state, each host's smoothed histogram of its durations over the
-- group's median, log-spaced bins from $lo to $hi, compared with its peers'
-- (duration_peer_scores). A job's states come from its logs, from the history only where no log
-- was ingested. A group with a state still running is compared again below, once the end of the
-- data is known.
CREATE TABLE wb_groups AS
SELECT cluster, job_id, state,
       duration_peer_scores(host, duration_ms, $lo, $hi, $bins, $weight, $bandwidth, $min_states, $threshold)
           FILTER (WHERE daemon <> 'history') AS logged,
       duration_peer_scores(host, duration_ms, $lo, $hi, $bins, $weight, $bandwidth, $min_states, $threshold)
           FILTER (WHERE daemon = 'history') AS history,
       max(coalesce(end_ts, start_ts)) AS last_ts, bool_or(duration_ms IS NULL) AS running
FROM wb_scope GROUP BY cluster, job_id, state;

-- Statement 3: the groups with a state still running, compared with it counted until the end
-- of the data (the latest end, or start, of the window's states in the cluster), or until its
-- attempt ended, if it did (as its logs say; the history only without them): a killed reduce's
-- copy in flight never logs its end, but stopped with it. Their states are read again.
CREATE TABLE wb_rerun AS
WITH horizon AS (
    SELECT cluster, date_part('epoch', max(last_ts)) AS last_s FROM wb_groups GROUP BY cluster
),
running AS (
    SELECT cluster, job_id, state FROM wb_groups WHERE running
),
attempt_ends AS (
    SELECT cluster, task_id,
           date_part('epoch', coalesce(max(end_ts) FILTER (WHERE daemon <> 'history'), max(end_ts))) AS end_s
    FROM states
    WHERE state IN ('Map', 'Reduce') AND end_ts IS NOT NULL
      AND ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR date >= CAST($from AS DATE))
      AND task_id IN (SELECT task_id FROM wb_scope WHERE duration_ms IS NULL AND task_id IS NOT NULL)
    GROUP BY cluster, task_id
),
durations AS (
    SELECT s.cluster, s.job_id, s.state, s.host, s.daemon,
           coalesce(s.duration_ms,
                    greatest(least(coalesce(a.end_s, h.last_s), h.last_s) - date_part('epoch', s.start_ts), 0) * 1000.0) AS ms
    FROM running r
    JOIN wb_scope s ON s.cluster = r.cluster AND (s.job_id IS NOT DISTINCT FROM r.job_id) AND s.state = r.state
    JOIN horizon h ON h.cluster = s.cluster
    LEFT JOIN attempt_ends a ON s.duration_ms IS NULL AND a.cluster = s.cluster AND a.task_id = s.task_id
)
SELECT cluster, job_id, state,
       duration_peer_scores(host, ms, $lo, $hi, $bins, $weight, $bandwidth, $min_states, $threshold)
           FILTER (WHERE daemon <> 'history') AS logged,
       duration_peer_scores(host, ms, $lo, $hi, $bins, $weight, $bandwidth, $min_states, $threshold)
           FILTER (WHERE daemon = 'history') AS history
FROM durations GROUP BY cluster, job_id, state;

-- Statement 4: each host's row per job and state.
CREATE TABLE wb_verdicts AS
WITH compared AS (
    SELECT cluster, job_id, state, unnest(coalesce(logged, history)) AS c FROM wb_groups WHERE NOT running
    UNION ALL
    SELECT cluster, job_id, state, unnest(coalesce(logged, history)) AS c FROM wb_rerun
)
-- The odd one out is farther than $threshold from more than half of its peers, as `indict`
-- says.
SELECT cluster, job_id, c['member'] AS host, state, c['score'] AS score, c['samples'] AS n,
       c['peers'] AS peers, c['median'] AS host_median_ms, c['peer_median'] AS peer_median_ms,
       c['slowdown'] AS slowdown,
       coalesce(c['score'] > 0.5, false) AND c['peers'] + 1 >= $min_hosts AND c['slowdown'] > $min_slowdown AS indicted
FROM compared;

-- Statement 5: per job, whether it indicts the host (in any state); read twice below.
CREATE TABLE wb_per_job AS
SELECT cluster, host, job_id, bool_or(indicted) AS indicted
FROM wb_verdicts WHERE job_id IS NOT NULL GROUP BY cluster, host, job_id;

-- Statement 6: the verdict, per job and state, and per host.
WITH job_blame AS (
    SELECT cluster, job_id, 1.0 / sum(CASE WHEN indicted THEN 1 ELSE 0 END) AS share
    FROM wb_per_job GROUP BY cluster, job_id HAVING bool_or(indicted)
),
rollup AS (
    SELECT p.cluster, p.host, count(*) AS jobs, sum(CASE WHEN p.indicted THEN 1 ELSE 0 END) AS jobs_indicted,
           sum(CASE WHEN p.indicted THEN b.share ELSE 0 END) AS blame
    FROM wb_per_job p LEFT JOIN job_blame b ON b.cluster = p.cluster AND b.job_id = p.job_id
    GROUP BY p.cluster, p.host
),
odd_jobs AS (
    SELECT cluster, count(*) AS jobs FROM job_blame GROUP BY cluster
),
window_states AS (
    SELECT cluster, host, bool_or(indicted) AS indicted FROM wb_verdicts WHERE job_id IS NULL GROUP BY cluster, host
),
host_verdict AS (
    SELECT coalesce(r.cluster, w.cluster) AS cluster, coalesce(r.host, w.host) AS host,
           r.jobs, r.jobs_indicted,
           coalesce(r.blame, 0) / greatest(coalesce(o.jobs, 0), 1) AS score,
           coalesce(w.indicted, false) AS window_indicted
    FROM rollup r
    FULL JOIN window_states w ON w.cluster = r.cluster AND w.host = r.host
    LEFT JOIN odd_jobs o ON o.cluster = coalesce(r.cluster, w.cluster)
)
SELECT cluster, job_id, host, state AS subject, score, indicted, n AS states, peers,
       round(host_median_ms, 1) AS host_median_ms, round(peer_median_ms, 1) AS peer_median_ms,
       round(slowdown, 3) AS slowdown, CAST(NULL AS BIGINT) AS jobs, CAST(NULL AS BIGINT) AS jobs_indicted
FROM wb_verdicts
UNION ALL
SELECT cluster, CAST(NULL AS VARCHAR) AS job_id, host, 'host' AS subject, score,
       (coalesce(jobs_indicted, 0) > 0 AND score >= $job_share) OR window_indicted AS indicted,
       CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE),
       jobs, jobs_indicted
FROM host_verdict
ORDER BY cluster, job_id NULLS FIRST, subject, score DESC, host;
