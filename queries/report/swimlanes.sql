-- SALSA's swimlanes: when each node was in each state. The states of one node and kind are
-- merged where they overlap or lie closer than $gap_seconds (a pixel of the page), so that a
-- lane holds a few spans, not every state.
--
-- @param cluster      text       = null   the cluster
-- @param from         timestamp  = null   states ending at or after this time (null: all history)
-- @param to           timestamp  = null   states starting before this time
-- @param gap_seconds  number     = 1      spans closer than this are one
--
-- Output: host, state, start_s, end_s (epoch seconds), states.

WITH scope AS (
    SELECT host, state, date_part('epoch', start_ts) AS s, date_part('epoch', coalesce(end_ts, start_ts)) AS e
    FROM states
    WHERE cluster = $cluster AND host IS NOT NULL AND start_ts IS NOT NULL AND daemon <> 'history'
      AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
),
-- The states starting in one gap-wide column are one span first: a hash aggregate, which
-- leaves the islands below far fewer rows to sort than there are states.
columns AS (
    SELECT host, state, min(s) AS s, max(e) AS e, count(*) AS n
    FROM scope GROUP BY host, state, floor(s / $gap_seconds)
),
ordered AS (
    SELECT host, state, s, e, n,
           max(e) OVER (PARTITION BY host, state ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM columns
),
islands AS (
    SELECT host, state, s, e, n,
           sum(CASE WHEN reach IS NULL OR s > reach + $gap_seconds THEN 1 ELSE 0 END)
               OVER (PARTITION BY host, state ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
)
SELECT host, state, min(s) AS start_s, max(e) AS end_s, sum(n) AS states
FROM islands
GROUP BY host, state, island
ORDER BY host, state, start_s
