-- The report's summary: the newest recorded run of each diagnosis for the cluster and window
-- (or the one run given), and every subject it indicted.
--
-- @param cluster  text       = null   the cluster
-- @param from     timestamp  = null   the window the runs diagnosed (null: all history)
-- @param to       timestamp  = null   ...
-- @param run      text       = null   one recorded run (null: the newest of each diagnosis)
--
-- Output: query, run_id, ran_at, subjects, host, job_id, subject, score, detail (one row per
-- indicted subject; one row with a NULL host for a run that indicted nobody).

WITH runs AS (
    SELECT query, run_id, max(ran_at) AS ran_at, count(*) AS subjects
    FROM diagnoses
    WHERE cluster = $cluster
      AND CASE WHEN $run IS NULL
               THEN (window_from IS NOT DISTINCT FROM $from) AND (window_to IS NOT DISTINCT FROM $to)
               ELSE run_id = $run END
    GROUP BY query, run_id
),
newest AS (
    SELECT query, run_id, ran_at, subjects, row_number() OVER (PARTITION BY query ORDER BY ran_at DESC) AS n
    FROM runs
)
SELECT n.query, n.run_id, n.ran_at, n.subjects, d.host, d.job_id, d.subject, d.score, d.detail
FROM newest n
LEFT JOIN diagnoses d ON d.run_id = n.run_id AND d.cluster = $cluster AND d.indicted
WHERE n.n = 1
ORDER BY n.query <> 'combined', n.query, d.score DESC NULLS LAST, d.host, d.job_id
