-- SALSA's alarms over time, for the hosts indicted: read after salsa_fingerpoint ran in the
-- same session (its `salsa_alarms` and `salsa_series` tables). Each bucket of $bucket_seconds
-- gives the share of the host's ticks in alarm, and the same share over its peers.
--
-- @param hosts           text    = null  the hosts drawn, comma-separated
-- @param step_seconds    number  = 5     salsa_fingerpoint's step (a tick k is at k·step)
-- @param bucket_seconds  number  = 60    seconds a point of the series sums up
--
-- Output: state, host ('(peers)' for the mean of the others), bucket_s (epoch seconds), alarm_share.

WITH drawn AS (SELECT unnest(string_to_array(coalesce($hosts, ''), ',')) AS host),
ticks AS (
    SELECT k.state, k.host, floor(a.tick * $step_seconds / $bucket_seconds) * $bucket_seconds AS bucket_s,
           CASE WHEN a.alarm THEN 1.0 ELSE 0.0 END AS alarm
    FROM salsa_alarms a JOIN salsa_series k ON k.series = a.series
)
SELECT t.state, coalesce(d.host, '(peers)') AS host, t.bucket_s, avg(t.alarm) AS alarm_share
FROM ticks t LEFT JOIN drawn d ON d.host = t.host
GROUP BY t.state, coalesce(d.host, '(peers)'), t.bucket_s
ORDER BY t.state, host, t.bucket_s
