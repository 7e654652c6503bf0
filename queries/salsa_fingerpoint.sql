-- SALSA fingerpointing: Algorithm 1 of SALSA §8, with the data-flow augmentation of §8.3.
--
-- Peer comparison over time. Every $step_seconds (a tick), each host's distribution of a
-- state's durations is its samples of the last $memory_ticks ticks in 12 log-spaced bins, decayed
-- with the lull correction exp(-lambda·Δt / (alpha·Δt + 1)) and smoothed by a Gaussian kernel; a host whose
-- distribution is farther than $threshold_p from more than half of its peers raises an alarm,
-- and $alarms consecutive alarms indict it (subject = the state).
--
-- Data-flow augmentation: a state longer than the $threshold_h quantile of its kind is an
-- outlier. Each DataNode state joins two hosts (the one that logged it and its reader or
-- writer, `peer_host`); a host associated with at least half of a kind's outliers is indicted
-- (subject = '<state>/dataflow'). A correlated fault — a slow reader makes its healthy
-- servers look slow — then points at the culprit: where the data-flow indicts a host, peer
-- comparison of that state indicts no other host. An outlier must also be $outlier_ratio times
-- the state's median: a fault-free window has a slowest 5% too, and a host can happen to be
-- in half of it.
--
-- A host is only alarmed while its states are slower than its peers' (its mean bin above the
-- peers' median): a host faster than the rest is not what slows the cluster down.
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
-- @param lo            number    = 0.33   smallest duration binned, as a multiple of the median
-- @param hi            number    = 3      largest duration binned, as a multiple of the median
-- @param bandwidth     number    = 1      kernel bandwidth, in bins
-- @param threshold_p   number    = 0.5    distance above which two hosts' distributions differ
-- @param alarms        integer   = 20     consecutive alarms that indict (SALSA: 20)
-- @param min_hosts     integer   = 3      hosts needed at a tick for a comparison
-- @param threshold_h   number    = 0.95   quantile above which a state is an outlier
-- @param outlier_ratio number    = 3      ... and at least this many times the state's median
-- @param min_outliers  integer   = 5      outliers needed before the data-flow indicts
-- @output verdict
-- @tune threshold_p = 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7
--
-- Output: cluster, host, subject (the state, or '<state>/dataflow'), score (longest run of
-- alarms / $alarms; for data-flow, the share of outliers the host took part in), indicted,
-- ticks (compared), alarmed (ticks with an alarm), outliers (data-flow rows: of the kind, in all).

-- Statement 1: the states of the window, read once. The intermediate results are tables of
-- this run's session, so that each is computed once (DataFusion reads a table again for every
-- mention of a WITH name).
CREATE TABLE salsa_scope AS
SELECT cluster, state, host, peer_host, start_ts, end_ts, duration_ms, daemon
FROM states
WHERE ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) - 1 AND coalesce(end_ts, start_ts) >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
  AND array_has(string_to_array($states, ','), state)
  AND host IS NOT NULL AND start_ts IS NOT NULL
  AND daemon <> 'history';

-- Statement 2: the samples (a state at its end, with its duration).
CREATE TABLE salsa_samples AS
WITH horizon AS (
    SELECT cluster, date_part('epoch', max(coalesce(end_ts, start_ts))) AS last_s FROM salsa_scope GROUP BY cluster
)
SELECT s.cluster, s.state, s.host, s.peer_host, s.daemon,
       coalesce(date_part('epoch', s.end_ts), h.last_s) AS t,
       coalesce(s.duration_ms, (h.last_s - date_part('epoch', s.start_ts)) * 1000.0) AS ms
FROM horizon h JOIN salsa_scope s ON s.cluster = h.cluster;

CREATE TABLE salsa_typical AS
SELECT cluster, state, median(ms) AS median_ms, percentile_cont($threshold_h) WITHIN GROUP (ORDER BY ms) AS outlier_ms
FROM salsa_samples GROUP BY cluster, state;

-- Statement 4: peer comparison, tick by tick. A series is one host's samples of one state; its
-- peers are the cluster's series of that state (integer keys keep the grouping cheap; BIGINT,
-- the type `tick_peer_scores` hands its members back in, so that the join on them stays one).
CREATE TABLE salsa_series AS
SELECT cluster, state, host,
       CAST(row_number() OVER (ORDER BY cluster, state, host) AS BIGINT) AS series,
       dense_rank() OVER (ORDER BY cluster, state) AS peers
FROM (SELECT DISTINCT cluster, state, host FROM salsa_samples) AS d;

-- Statement 5: each series' distributions, tick by tick, compared with its peers': its samples of the last
-- $memory_ticks ticks in twelve log-spaced bins of the duration over the median, from $lo to
-- $hi, each weighing exp(-lambda·Δt / (alpha·Δt + 1)), Δt its age at the tick, smoothed by a
-- Gaussian kernel; `level`, the mean bin, says which side of its peers a host is on.
-- `tick_peer_scores` does it in one aggregate per peer group: each series' score at a tick is
-- the share of the tick's other series farther than $threshold_p, and `hosts` and
-- `peer_level` are the tick's series and the median of their levels. (`tick_histograms`,
-- `kde_smooth` and `peer_scores` give the same numbers in three steps, but hand every series'
-- histogram at every tick from one GROUP BY to the next.)
CREATE TABLE salsa_alarms AS
WITH labelled AS (
    SELECT k.series, k.peers, s.t,
           CAST(least(greatest(floor(ln(greatest(s.ms / greatest(m.median_ms, 0.001), 1e-9) / $lo) / ln($hi / $lo) * 12), 0), 11) AS BIGINT) AS bin
    FROM salsa_typical m
    JOIN salsa_series k ON k.cluster = m.cluster AND k.state = m.state
    JOIN salsa_samples s ON s.cluster = k.cluster AND s.state = k.state AND s.host = k.host
),
compared AS (
    SELECT unnest(tick_peer_scores(series, bin, 12, t, $step_seconds, $memory_ticks, $lambda, $alpha, $bandwidth, $threshold_p)) AS p
    FROM labelled GROUP BY peers
)
-- An alarm: enough hosts at the tick, this one slower than their median, and far from more
-- than half of them (a peer score above 0.5). A table, which `kahuna report` draws over time.
SELECT p['member'] AS series, p['tick'] AS tick,
       p['hosts'] >= $min_hosts AND p['level'] > p['peer_level'] AND coalesce(p['score'] > 0.5, false) AS alarm
FROM compared;

-- Statement 6: $alarms consecutive alarms indict: each series' longest run of them, in tick
-- order.
CREATE TABLE salsa_peer AS
WITH per_series AS (
    SELECT series, longest_run(alarm, tick) AS longest, count(*) AS ticks,
           sum(CASE WHEN alarm THEN 1 ELSE 0 END) AS alarmed
    FROM salsa_alarms GROUP BY series
)
SELECT k.cluster, k.state, k.host, p.longest, p.ticks, p.alarmed
FROM salsa_series k JOIN per_series p ON p.series = k.series;

-- Statement 7: the data flow: the outliers, each with the host at its other end. A table,
-- since the counts below read it twice (DataFusion would plan it anew at each mention).
CREATE TABLE salsa_outliers AS
WITH outlying AS (
    SELECT s.cluster, s.state, s.host, s.peer_host
    FROM salsa_typical m JOIN salsa_samples s ON s.cluster = m.cluster AND s.state = m.state
    WHERE s.daemon = 'datanode' AND s.ms > m.outlier_ms AND s.ms > $outlier_ratio * m.median_ms
),
-- DataNodes name their peers by address; `addresses` maps each back to its host (read only
-- where there are outliers to name).
peer_names AS (
    SELECT DISTINCT cluster, host, address
    FROM addresses
    WHERE ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR date >= CAST($from AS DATE) - 1)
      AND ($to IS NULL OR date <= CAST($to AS DATE))
      AND cluster IN (SELECT DISTINCT cluster FROM outlying)
)
SELECT o.cluster, o.state, o.host, coalesce(a.host, o.peer_host) AS peer
FROM outlying o LEFT JOIN peer_names a ON a.cluster = o.cluster AND a.address = o.peer_host;

-- Statement 8: each outlier joins the host that logged it and its peer, each once: a block
-- read locally joins its host once, not twice.
CREATE TABLE salsa_flow AS
WITH associations AS (
    SELECT cluster, state, host FROM salsa_outliers
    UNION ALL
    SELECT cluster, state, peer AS host FROM salsa_outliers WHERE peer IS NOT NULL AND peer <> host
),
outlier_counts AS (
    SELECT cluster, state, count(*) AS total FROM salsa_outliers GROUP BY cluster, state
)
SELECT a.cluster, a.state, a.host, count(*) AS associated, max(c.total) AS total,
       count(*) >= 0.5 * max(c.total) AND max(c.total) >= $min_outliers AS indicted
FROM outlier_counts c JOIN associations a ON a.cluster = c.cluster AND a.state = c.state
GROUP BY a.cluster, a.state, a.host;

-- Statement 9: the verdict.
WITH flow_culprits AS (
    SELECT DISTINCT cluster, state FROM salsa_flow WHERE indicted
)
SELECT p.cluster, p.host, p.state AS subject,
       CAST(p.longest AS DOUBLE) / $alarms AS score,
       p.longest >= $alarms
           AND (f.state IS NULL OR coalesce(v.indicted, false)) AS indicted,
       p.ticks, p.alarmed, CAST(NULL AS BIGINT) AS outliers
FROM salsa_peer p
LEFT JOIN flow_culprits f ON f.cluster = p.cluster AND f.state = p.state
LEFT JOIN salsa_flow v ON v.cluster = p.cluster AND v.state = p.state AND v.host = p.host
UNION ALL
SELECT cluster, host, state || '/dataflow' AS subject,
       CAST(associated AS DOUBLE) / total AS score, indicted,
       CAST(NULL AS BIGINT) AS ticks, CAST(NULL AS BIGINT) AS alarmed, total AS outliers
FROM salsa_flow
ORDER BY cluster, subject, score DESC, host;
