-- SALSA fingerpointing: Algorithm 1 of SALSA §8, with the data-flow augmentation of §8.3.
--
-- Peer comparison over time. Every $step_seconds (a tick), each host's distribution of a
-- state's durations is its samples of the last $memory_ticks ticks, decayed with the lull
-- correction exp(-lambda·Δt / (alpha·Δt + 1)) and smoothed by a Gaussian kernel; a host whose
-- distribution is farther than $threshold_p from more than half of its peers raises an alarm,
-- and $alarms consecutive alarms indict it (subject = the state).
--
-- Data-flow augmentation: a state longer than the $threshold_h quantile of its kind is an
-- outlier. Each DataNode state joins two hosts (the one that logged it and its reader or
-- writer, `peer_host`); a host associated with at least half of a kind's outliers is indicted
-- (subject = '<state>/dataflow'). A correlated fault — a slow reader makes its healthy
-- servers look slow — then points at the culprit: where the data-flow indicts a host, peer
-- comparison of that state indicts no other host.
-- Durations are binned as multiples of the state's median over the window, and a state still
-- running at the end of the data counts as long as it has run.
--
-- @param from          timestamp = null   states ending at or after this time (null: all history)
-- @param to            timestamp = null   states starting before this time
-- @param cluster       text      = null   cluster (null: each cluster on its own)
-- @param states        text      = 'Map,ReadBlock,WriteBlock'   states compared, comma-separated
-- @param step_seconds  number    = 5      seconds between two comparisons (SALSA's t ← t + 1)
-- @param memory_ticks  integer   = 24     ticks a sample stays in a distribution
-- @param lambda        number    = 0.02   decay rate per second
-- @param alpha         number    = 0.1    lull correction (0: plain exponential decay)
-- @param bins          integer   = 12     histogram bins (log-spaced)
-- @param lo            number    = 0.33   smallest duration binned, as a multiple of the median
-- @param hi            number    = 3      largest duration binned, as a multiple of the median
-- @param bandwidth     number    = 1      kernel bandwidth, in bins
-- @param threshold_p   number    = 0.5    distance above which two hosts' distributions differ
-- @param alarms        integer   = 20     consecutive alarms that indict (SALSA: 20)
-- @param min_hosts     integer   = 3      hosts needed at a tick for a comparison
-- @param threshold_h   number    = 0.95   quantile above which a state is an outlier
-- @param min_outliers  integer   = 10     outliers needed before the data-flow indicts
-- @output verdict
-- @tune threshold_p = 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7
--
-- Output: cluster, host, subject (the state, or '<state>/dataflow'), score (longest run of
-- alarms / $alarms; for data-flow, the share of outliers the host took part in), indicted,
-- ticks (compared), alarmed (ticks with an alarm), outliers (data-flow rows: of the kind, in all).

WITH scope AS (
    SELECT cluster, state, host, peer_host, start_ts, end_ts, duration_ms, daemon
    FROM states
    WHERE ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
      AND array_has(string_to_array($states, ','), state)
      AND host IS NOT NULL AND start_ts IS NOT NULL
      AND daemon <> 'history'
),
horizon AS (
    SELECT cluster, date_part('epoch', max(coalesce(end_ts, start_ts))) AS last_s FROM scope GROUP BY cluster
),
samples AS (
    SELECT s.cluster, s.state, s.host, s.peer_host, s.daemon,
           coalesce(date_part('epoch', s.end_ts), h.last_s) AS t,
           coalesce(s.duration_ms, (h.last_s - date_part('epoch', s.start_ts)) * 1000.0) AS ms
    FROM scope s JOIN horizon h ON s.cluster = h.cluster
),
typical AS (
    SELECT cluster, state, approx_median(ms) AS median_ms,
           approx_percentile_cont(ms, $threshold_h) AS outlier_ms
    FROM samples GROUP BY cluster, state
),
labelled AS (
    SELECT s.cluster, s.state, s.host, s.t,
           CAST(least(greatest(floor(ln(greatest(s.ms / greatest(m.median_ms, 0.001), 1e-9) / $lo)
                                     / ln($hi / $lo) * $bins), 0), $bins - 1) AS BIGINT) AS label
    FROM samples s JOIN typical m ON s.cluster = m.cluster AND s.state = m.state
),
-- Each sample belongs to the distribution of the $memory_ticks ticks that follow it.
ticked AS (
    SELECT l.cluster, l.state, l.host, l.t, l.label,
           (floor(l.t / $step_seconds) + 1 + g.value) * $step_seconds AS tick
    FROM labelled l CROSS JOIN generate_series(0, $memory_ticks - 1) AS g
),
distributions AS (
    SELECT cluster, state, host, tick,
           kde_smooth(decayed_histogram(label, $bins, t, $lambda, $alpha), $bandwidth) AS dist
    FROM ticked GROUP BY cluster, state, host, tick
),
alarms AS (
    SELECT cluster, state, host, tick,
           coalesce(indict(dist, $threshold_p) OVER (PARTITION BY cluster, state, tick), false)
               AND count(*) OVER (PARTITION BY cluster, state, tick) >= $min_hosts AS alarm
    FROM distributions
),
runs AS (
    SELECT cluster, state, host, tick, alarm,
           consecutive(alarm) OVER (PARTITION BY cluster, state, host ORDER BY tick) AS run
    FROM alarms
),
peer_verdict AS (
    SELECT cluster, state, host, max(run) AS longest, count(*) AS ticks,
           sum(CASE WHEN alarm THEN 1 ELSE 0 END) AS alarmed
    FROM runs GROUP BY cluster, state, host
),
-- DataNodes name their peers by address; their own address is in the lines that start writes.
addresses AS (
    SELECT DISTINCT cluster, host, regexp_match(message, 'dest: /([^:,]+)')[1] AS address
    FROM logs
    WHERE ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR date >= CAST($from AS DATE) - 1)
      AND ($to IS NULL OR date <= CAST($to AS DATE))
      AND daemon = 'datanode' AND message LIKE 'Receiving block%' AND host IS NOT NULL
),
outliers AS (
    SELECT row_number() OVER () AS id, s.cluster, s.state, s.host, coalesce(a.host, s.peer_host) AS peer
    FROM samples s
    JOIN typical m ON s.cluster = m.cluster AND s.state = m.state
    LEFT JOIN addresses a ON a.cluster = s.cluster AND a.address = s.peer_host
    WHERE s.daemon = 'datanode' AND s.ms > m.outlier_ms
),
-- UNION, not UNION ALL: a state read locally joins its host once, not twice.
associations AS (
    SELECT o.cluster, o.state, o.id, o.host FROM outliers o
    UNION
    SELECT o.cluster, o.state, o.id, o.peer AS host FROM outliers o WHERE o.peer IS NOT NULL
),
outlier_counts AS (
    SELECT cluster, state, count(*) AS total FROM outliers GROUP BY cluster, state
),
flow_verdict AS (
    SELECT a.cluster, a.state, a.host, count(*) AS associated, max(c.total) AS total,
           count(*) >= 0.5 * max(c.total) AND max(c.total) >= $min_outliers AS indicted
    FROM associations a JOIN outlier_counts c ON a.cluster = c.cluster AND a.state = c.state
    GROUP BY a.cluster, a.state, a.host
),
flow_culprits AS (
    SELECT DISTINCT cluster, state FROM flow_verdict WHERE indicted
)
SELECT p.cluster, p.host, p.state AS subject,
       CAST(p.longest AS DOUBLE) / $alarms AS score,
       p.longest >= $alarms
           AND (f.state IS NULL OR coalesce(v.indicted, false)) AS indicted,
       p.ticks, p.alarmed, CAST(NULL AS BIGINT) AS outliers
FROM peer_verdict p
LEFT JOIN flow_culprits f ON f.cluster = p.cluster AND f.state = p.state
LEFT JOIN flow_verdict v ON v.cluster = p.cluster AND v.state = p.state AND v.host = p.host
UNION ALL
SELECT cluster, host, state || '/dataflow' AS subject,
       CAST(associated AS DOUBLE) / total AS score, indicted,
       CAST(NULL AS BIGINT) AS ticks, CAST(NULL AS BIGINT) AS alarmed, total AS outliers
FROM flow_verdict
ORDER BY cluster, subject, score DESC, host;
