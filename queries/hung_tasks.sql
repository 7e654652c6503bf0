-- Hung tasks: the attempt that stopped reporting progress while it ran.
--
-- A task's child reports its progress to its TaskTracker every 3 s while it makes any
-- (`Task.PROGRESS_INTERVAL`), and a reduce with no copy in flight says it is alive every 5 s
-- (`ReduceCopier`, "as we don't want TT to think we're stuck and kill us"); the TaskTracker logs
-- each report (`attempt_… 0.4% reduce > copy (12 of 40 at 2.10 MB/s) >`). An attempt silent for
-- $silence seconds while it ran has hung: Hadoop kills one silent for `mapred.task.timeout`
-- (600 s), and speculative execution usually ends it sooner, when a backup wins. By duration
-- such an attempt is a straggler (both end when a backup wins), and it uses no resources, so
-- neither the peer comparisons of durations nor the black box tell it apart; its silence does.
-- This is how HADOOP-1036 (a map's child dies, its TaskTracker keeps it alive), HADOOP-1152 (a
-- reduce's copier fails to rename an output for ever) and HADOOP-2080 (a reduce's in-memory merge
-- never completes) show.
--
-- An attempt's silence is the longest stretch between its launch, its reports, the starts and
-- ends of its copies of map outputs and its end (for one still running, where the cluster's
-- TaskTracker logs end in the window), leaving out stretches a copy was in flight over: Hadoop's
-- reduce does not report while it waits on its copiers, and a try that gets no answer waits out
-- a read timeout (3 min). Where attempts went silent on more than $host_share of a job's hosts,
-- the job's own code is slow to report (a reduce function that runs minutes on one key), not a
-- node: no one is indicted for that job.
--
-- Reads the TaskTrackers' logs and the reduces' own (`logs`; `states` from daemon 'tasktracker'
-- and their ReduceCopy states); the job history has no reports, and a cluster ingested from it
-- alone has no verdict here, nor has a YARN cluster (its reports are in the MRAppMaster's log,
-- which this does not read yet).
--
-- @param from        timestamp = null   attempts running at or after this time (null: all history)
-- @param to          timestamp = null   attempts starting before this time (null: no end)
-- @param cluster     text      = null   cluster (null: every cluster, each on its own)
-- @param silence     number    = 30     seconds without a report that make an attempt hung (ten of a progressing task's reports, six of a waiting reduce's)
-- @param host_share  number    = 0.5    share of a job's hosts with silent attempts above which the job, not a node, is slow to report
-- @output verdict
--
-- Output, per silent attempt: cluster, job_id, host, subject ('hang'), score (its silence over
-- $silence), indicted (unless its job is slow to report), task_id, silence_s, reports (its
-- TaskTracker logged), hosts (the job's) and silent_hosts (theirs with a silent attempt). Per
-- host (job_id NULL, subject 'host'): score (its longest silence in jobs not slow to report, over
-- $silence), indicted, silence_s, attempts, silent (attempts indicted).

-- Statement 1: the attempts that ran in the window, as their TaskTrackers logged them.
CREATE TABLE hang_attempts AS
SELECT cluster, job_id, host, task_id,
       CASE WHEN $from IS NULL THEN start_ts ELSE greatest(start_ts, $from) END AS start_ts, end_ts
FROM states
WHERE daemon = 'tasktracker' AND state IN ('Map', 'Reduce')
  AND host IS NOT NULL AND task_id IS NOT NULL AND job_id IS NOT NULL AND start_ts IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to));

-- Statement 2: the attempts' signs of life in the window: the TaskTrackers' progress reports
-- (`attempt_… 0.4% reduce > copy …`), and the starts and ends of copies of map outputs (with
-- each copy, to leave out the stretches it was in flight over).
CREATE TABLE hang_reports AS
SELECT cluster, task_id, ts, false AS copy, CAST(NULL AS TIMESTAMP) AS copy_end
FROM logs
WHERE daemon = 'tasktracker' AND task_id IS NOT NULL
  AND regexp_like(message, '^\S+ -?[0-9.]+(E-?[0-9]+)?%( |$)')
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND ts < $to))
UNION ALL
SELECT cluster, task_id, start_ts, true, end_ts
FROM states
WHERE state = 'ReduceCopy' AND task_id IS NOT NULL AND start_ts IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to));

-- Statement 3: every attempt's stretches between its signs of life; its silence is the longest
-- no copy was in flight over (a copy that never ended was in flight until its attempt did). An
-- attempt still running ends where the cluster's TaskTracker logs end in the window.
CREATE TABLE hang_silences AS
WITH horizon AS (
    SELECT cluster, max(ts) AS last_ts
    FROM logs
    WHERE daemon = 'tasktracker'
      AND ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR (date >= CAST($from AS DATE) AND ts >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND ts < $to))
    GROUP BY cluster
),
ends AS (
    SELECT a.cluster, a.job_id, a.host, a.task_id, a.start_ts,
           CASE WHEN a.end_ts IS NULL THEN greatest(h.last_ts, a.start_ts)
                WHEN $to IS NULL THEN a.end_ts
                ELSE least(a.end_ts, $to) END AS end_ts
    FROM hang_attempts a JOIN horizon h ON h.cluster = a.cluster
),
points AS (
    SELECT cluster, task_id, start_ts AS ts, false AS report FROM ends
    UNION ALL
    SELECT cluster, task_id, end_ts, false FROM ends
    UNION ALL
    SELECT e.cluster, e.task_id, r.ts, NOT r.copy
    FROM ends e JOIN hang_reports r ON r.cluster = e.cluster AND r.task_id = e.task_id
    WHERE r.ts >= e.start_ts AND r.ts <= e.end_ts
    UNION ALL
    SELECT e.cluster, e.task_id, r.copy_end, false
    FROM ends e JOIN hang_reports r ON r.cluster = e.cluster AND r.task_id = e.task_id
    WHERE r.copy_end > e.start_ts AND r.copy_end < e.end_ts
),
stretches AS (
    SELECT cluster, task_id, lag(ts) OVER (PARTITION BY cluster, task_id ORDER BY ts) AS from_ts, ts AS to_ts
    FROM points
),
-- Only a stretch of a third of $silence or more is checked against the copies in flight (a
-- shorter one is a live attempt's pause either way).
long_stretches AS (
    SELECT s.cluster, s.task_id, s.from_ts, s.to_ts,
           bool_or(c.task_id IS NOT NULL) AS copying
    FROM stretches s
    LEFT JOIN hang_reports c ON c.cluster = s.cluster AND c.task_id = s.task_id AND c.copy
         AND c.ts <= s.from_ts AND (c.copy_end IS NULL OR c.copy_end >= s.to_ts)
    WHERE date_part('epoch', s.to_ts) - date_part('epoch', s.from_ts) >= $silence / 3
    GROUP BY s.cluster, s.task_id, s.from_ts, s.to_ts
),
silent AS (
    SELECT cluster, task_id,
           max(CASE WHEN copying THEN 0 ELSE date_part('epoch', to_ts) - date_part('epoch', from_ts) END) AS long_s
    FROM long_stretches GROUP BY cluster, task_id
),
short AS (
    SELECT cluster, task_id, max(date_part('epoch', to_ts) - date_part('epoch', from_ts)) AS short_s
    FROM stretches WHERE date_part('epoch', to_ts) - date_part('epoch', from_ts) < $silence / 3
    GROUP BY cluster, task_id
),
reported AS (
    SELECT cluster, task_id, sum(CASE WHEN report THEN 1 ELSE 0 END) AS reports FROM points GROUP BY cluster, task_id
)
SELECT e.cluster, e.job_id, e.host, e.task_id,
       greatest(coalesce(l.long_s, 0), coalesce(s.short_s, 0)) AS silence_s, p.reports
FROM ends e
JOIN reported p ON p.cluster = e.cluster AND p.task_id = e.task_id
LEFT JOIN silent l ON l.cluster = e.cluster AND l.task_id = e.task_id
LEFT JOIN short s ON s.cluster = e.cluster AND s.task_id = e.task_id;

-- Statement 4: the verdict. A TaskTracker that logged no report at all in the window (logging
-- above INFO, or its reports filtered out) says nothing of its attempts' silences: not judged.
WITH judged AS (
    SELECT s.* FROM hang_silences s
    JOIN (SELECT cluster, host FROM hang_silences GROUP BY cluster, host HAVING sum(reports) > 0) AS r
      ON r.cluster = s.cluster AND r.host = s.host
),
jobs AS (
    SELECT cluster, job_id, count(DISTINCT host) AS hosts,
           count(DISTINCT CASE WHEN silence_s >= $silence THEN host END) AS silent_hosts
    FROM judged GROUP BY cluster, job_id
),
attempts AS (
    SELECT s.*, j.hosts, j.silent_hosts, j.silent_hosts > $host_share * j.hosts AS job_slow
    FROM judged s JOIN jobs j ON j.cluster = s.cluster AND j.job_id IS NOT DISTINCT FROM s.job_id
)
SELECT cluster, job_id, host, 'hang' AS subject, silence_s / $silence AS score, NOT job_slow AS indicted, task_id,
       round(silence_s, 1) AS silence_s, reports, hosts, silent_hosts, CAST(NULL AS BIGINT) AS attempts,
       CAST(NULL AS BIGINT) AS silent
FROM attempts WHERE silence_s >= $silence
UNION ALL
SELECT cluster, CAST(NULL AS VARCHAR), host, 'host',
       max(CASE WHEN job_slow THEN 0 ELSE silence_s END) / $silence,
       bool_or(silence_s >= $silence AND NOT job_slow), CAST(NULL AS VARCHAR),
       round(max(CASE WHEN job_slow THEN 0 ELSE silence_s END), 1), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
       CAST(NULL AS BIGINT), count(*), sum(CASE WHEN silence_s >= $silence AND NOT job_slow THEN 1 ELSE 0 END)
FROM attempts GROUP BY cluster, host
ORDER BY cluster, job_id NULLS FIRST, score DESC, host;
