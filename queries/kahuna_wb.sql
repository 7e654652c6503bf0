-- Kahuna-WB: the host whose state durations differ from most of its peers (Kahuna §VI-A).
--
-- For each job and SALSA state (DataNode states, which carry no job, are compared over the
-- whole window), every host's durations become one histogram; a host is indicted when the
-- square-root Jensen-Shannon distance of its histogram exceeds $threshold against more than
-- half of its peers (0.7 by default: with a few states per host and job, healthy hosts'
-- histograms differ by up to ~0.6 on simulated Sort runs). Durations are divided by the peer
-- group's median before binning, so one set of bins fits Maps of seconds and Reduces of hours. A state still running at the
-- end of the data (a hang) counts with the time it has run so far, so a hung host stands out
-- instead of dropping out.
--
-- @param from       timestamp = null   states starting at or after this time (null: all history)
-- @param to         timestamp = null   states starting before this time (null: no end)
-- @param cluster    text      = null   cluster to diagnose (null: every cluster, each on its own)
-- @param states     text      = 'Map,Reduce,ReduceCopy,ReduceMergeCopy,ReadBlock,WriteBlock'   states compared, comma-separated
-- @param threshold  number    = 0.7    distance above which two hosts' histograms differ
-- @param bins       integer   = 24     histogram bins (log-spaced)
-- @param lo         number    = 0.1    smallest duration binned, as a multiple of the peer median
-- @param hi         number    = 10     largest duration binned, as a multiple of the peer median
-- @param min_states integer   = 5      a host takes part with at least this many states in the group
-- @param min_hosts  integer   = 3      a group is compared only with at least this many hosts
-- @output verdict
-- @tune threshold = 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85
--
-- Output: cluster, job_id (NULL for DataNode states), host, subject (the state), score (the
-- share of peers farther than $threshold), indicted, states (on this host), peers,
-- host_median_ms and peer_median_ms (what a reader compares first).

WITH scope AS (
    SELECT cluster, job_id, state, host, start_ts, end_ts, duration_ms
    FROM states
    WHERE ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
      AND array_has(string_to_array($states, ','), state)
      AND host IS NOT NULL AND start_ts IS NOT NULL
      AND daemon <> 'history'
),
-- The end of the data, per cluster: how long an unterminated state has run so far.
horizon AS (
    SELECT cluster, max(coalesce(end_ts, start_ts)) AS last_ts FROM scope GROUP BY cluster
),
durations AS (
    SELECT s.cluster, coalesce(s.job_id, '(window)') AS job_id, s.state, s.host,
           coalesce(s.duration_ms,
                    (date_part('epoch', h.last_ts) - date_part('epoch', s.start_ts)) * 1000.0) AS ms
    FROM scope s JOIN horizon h ON s.cluster = h.cluster
),
peer_median AS (
    SELECT cluster, job_id, state, approx_median(ms) AS median_ms
    FROM durations GROUP BY cluster, job_id, state
),
per_host AS (
    SELECT d.cluster, d.job_id, d.state, d.host, count(*) AS n,
           approx_median(d.ms) AS host_median_ms, max(m.median_ms) AS peer_median_ms,
           state_histogram(d.ms / greatest(m.median_ms, 0.001), $lo, $hi, $bins, 'log') AS hist
    FROM durations d JOIN peer_median m
      ON d.cluster = m.cluster AND d.job_id = m.job_id AND d.state = m.state
    GROUP BY d.cluster, d.job_id, d.state, d.host
    HAVING count(*) >= $min_states
),
compared AS (
    SELECT cluster, job_id, state, host, n, host_median_ms, peer_median_ms,
           count(*) OVER (PARTITION BY cluster, job_id, state) - 1 AS peers,
           peer_score(hist, $threshold) OVER (PARTITION BY cluster, job_id, state) AS score,
           indict(hist, $threshold) OVER (PARTITION BY cluster, job_id, state) AS odd_one_out
    FROM per_host
)
SELECT cluster,
       CASE WHEN job_id = '(window)' THEN NULL ELSE job_id END AS job_id,
       host, state AS subject, score,
       coalesce(odd_one_out, false) AND peers + 1 >= $min_hosts AS indicted,
       n AS states, peers, round(host_median_ms, 1) AS host_median_ms, round(peer_median_ms, 1) AS peer_median_ms
FROM compared
ORDER BY cluster, job_id, subject, score DESC, host;
