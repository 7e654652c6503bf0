-- The report's time axis: the first and last instant of the window's states, and its hosts.
--
-- @param cluster  text       = null   the cluster
-- @param from     timestamp  = null   states ending at or after this time (null: all history)
-- @param to       timestamp  = null   states starting before this time
--
-- Output: first_s, last_s (epoch seconds), hosts, states.

SELECT min(date_part('epoch', start_ts)) AS first_s, max(date_part('epoch', coalesce(end_ts, start_ts))) AS last_s,
       count(DISTINCT host) AS hosts, count(*) AS states
FROM states
WHERE cluster = $cluster AND host IS NOT NULL AND start_ts IS NOT NULL
  AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
