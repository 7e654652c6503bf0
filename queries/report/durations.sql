-- Kahuna-WB's evidence: each host's state durations as a histogram, beside its peers'.
--
-- Durations are divided by the state's median over the cluster and binned in half-octaves
-- from 1/16 to 16 times it (bin -8 to 8; 0 is the median); `share` is the host's share of its
-- states of that kind in the bin. The report draws an indicted host's bars over the median of
-- its peers' shares.
--
-- @param cluster  text       = null   the cluster
-- @param from     timestamp  = null   states starting at or after this time (null: all history)
-- @param to       timestamp  = null   ... and before this time
--
-- Output: state, host, bin, share.

WITH scope AS (
    SELECT state, host, duration_ms
    FROM states
    WHERE cluster = $cluster AND duration_ms IS NOT NULL AND host IS NOT NULL AND daemon <> 'history'
      AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
),
typical AS (SELECT state, median(duration_ms) AS median_ms FROM scope GROUP BY state),
binned AS (
    SELECT s.state, s.host,
           CAST(least(greatest(floor(2 * log2(greatest(s.duration_ms, 1) / greatest(t.median_ms, 1)) + 0.5), -8), 8) AS BIGINT) AS bin
    FROM scope s JOIN typical t ON t.state = s.state
),
counts AS (SELECT state, host, bin, count(*) AS n FROM binned GROUP BY state, host, bin)
SELECT state, host, bin, CAST(n AS DOUBLE) / sum(n) OVER (PARTITION BY state, host) AS share
FROM counts
ORDER BY state, host, bin
