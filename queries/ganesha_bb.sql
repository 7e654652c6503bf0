-- Ganesha / Kahuna-BB: the host whose black-box behaviour differs from its peers' (Ganesha §4).
--
-- Each sadc-vector is classified into one of the $k profiles of the newest `ganesha_models`
-- row (see ganesha_train.sql), or as unknown (label $k). Every $step_seconds, each host's label
-- histogram over the last $memory_seconds, decayed exponentially with age, is compared with its
-- peers' (square-root Jensen-Shannon distance); farther than $threshold from more than (n-1)/2
-- peers raises an alarm, unless it is near at least $near_peers of them. The alarms'
-- exponentially weighted moving average (weight $ewma_alpha, from 0) is the host's weighted
-- alarm count; it indicts the host once it exceeds $alarm_level.
-- With the default 0.02 the count remembers about the last 50 ticks (4 minutes): healthy hosts
-- differ from the rest for a minute now and then (a Reduce's shuffle, a job's last Maps), a
-- faulty one for as long as its fault lasts.
--
-- Ganesha ran on one-second captures: memory and decay count samples. A capture every
-- $sample_seconds (by default read from the capture: each host's span over its vectors, the
-- median host) keeps $memory_seconds × $sample_seconds of history in a histogram and decays
-- $sample_seconds times slower, so a histogram holds as many vectors as Ganesha's did; with 10 s
-- samples and one-second settings each would hold six, and every host differs from its peers.
--
-- Decay is relative to the tick (a common factor of a histogram, which the distance ignores),
-- so each second's vector is weighed once per tick bucket and the histograms are sums over
-- 16 spelled-out bins (k ≤ 15: bins past the unknown label stay 0 and do not change distances).
--
-- @param from            timestamp = null   window start (null: all history)
-- @param to              timestamp = null   window end
-- @param cluster         text      = null   cluster (null: each cluster on its own)
-- @param model_cluster   text      = null   whose model to use (null: the newest model of any cluster)
-- @param k               integer   = 7      profiles in the model (as trained; at most 15)
-- @param step_seconds    number    = 5      seconds between comparisons
-- @param memory_seconds  number    = 60     samples older than this weigh nothing (at one sample a second)
-- @param lambda          number    = 0.05   decay rate per second (at one sample a second)
-- @param sample_seconds  number    = null   seconds between a host's sadc-vectors (null: from the capture)
-- @param threshold       number    = 0.4    distance above which two hosts differ
-- @param ewma_alpha      number    = 0.02   weight of the newest alarm in the alarm count
-- @param alarm_level     number    = 0.6    weighted alarm count that indicts
-- @param min_hosts       integer   = 3      hosts needed at a tick for a comparison
-- @param near_peers      integer   = 2      a host near this many peers is one of a group, not an outlier (0: Ganesha's rule)
-- @output verdict
-- @tune alarm_level = 0.5, 0.6, 0.7, 0.8, 0.9, 0.95
--
-- Output: cluster, host, subject ('sadc'), score (highest weighted alarm count), indicted,
-- ticks (compared), alarmed (ticks with an alarm), unknown_share (vectors no profile explains).

-- Statement 1: every vector's profile (the intermediate results are tables of this run's
-- session, so that each is computed once).
CREATE TABLE ganesha_labels AS
WITH model AS (
    SELECT model FROM ganesha_models
    WHERE ($model_cluster IS NULL OR cluster = $model_cluster)
    ORDER BY date DESC, trained_to DESC
    LIMIT 1
)
SELECT s.cluster, s.host, date_part('epoch', s.ts) AS t,
       gmm_classify(m.model, s.cpu_user_pct, s.cpu_system_pct, s.cpu_iowait_pct, s.cswch_s, s.runq_sz,
                    s.plist_sz, s.ldavg_1, s.rx_kb_s, s.tx_kb_s, s.pgpgin_s, s.pgpgout_s, s.fault_s,
                    s.bread_s, s.bwrtn_s) AS label
FROM model m CROSS JOIN sadc s
WHERE ($cluster IS NULL OR s.cluster = $cluster)
  AND ($from IS NULL OR (s.date >= CAST($from AS DATE) AND s.ts >= $from))
  AND ($to IS NULL OR (s.date <= CAST($to AS DATE) AND s.ts < $to))
  AND s.host IS NOT NULL;

-- Statement 2: the capture's pace, and the ticks each step's vectors count in.
CREATE TABLE ganesha_pace AS
SELECT coalesce(CAST($sample_seconds AS DOUBLE), greatest(1.0, round(approx_median(span)))) AS s
FROM (SELECT CAST(max(t) - min(t) AS DOUBLE) / greatest(count(*) - 1, 1) AS span
      FROM ganesha_labels GROUP BY cluster, host) AS h;

CREATE TABLE ganesha_offsets AS
SELECT g.value FROM generate_series(0, 100000) AS g CROSS JOIN ganesha_pace p
WHERE g.value < ceil($memory_seconds * p.s / $step_seconds);

-- Statement 3: integer keys for hosts (series) and clusters (peers), which keep grouping cheap.
CREATE TABLE ganesha_series AS
SELECT cluster, host, row_number() OVER (ORDER BY cluster, host) AS series,
       dense_rank() OVER (ORDER BY cluster) AS peers
FROM (SELECT DISTINCT cluster, host FROM ganesha_labels) AS d;

-- Statement 4: histograms, alarms, the weighted alarm count.
CREATE TABLE ganesha_levels AS
WITH buckets AS (
    -- The vectors of a step, each weighed by its age at the end of the step.
    SELECT k.series, k.peers, CAST(floor(l.t / $step_seconds) AS BIGINT) AS bucket, l.label,
           sum(exp(-$lambda / p.s * ((floor(l.t / $step_seconds) + 1) * $step_seconds - l.t))) AS w
    FROM ganesha_series k JOIN ganesha_labels l ON l.cluster = k.cluster AND l.host = k.host
    CROSS JOIN ganesha_pace p
    WHERE l.label IS NOT NULL
    GROUP BY k.series, k.peers, bucket, l.label
),
-- Each step's vectors belong to the histograms of the ticks within the memory after it.
ticked AS (
    SELECT b.series, b.peers, b.bucket + 1 + g.value AS tick, b.label,
           b.w * exp(-$lambda / p.s * $step_seconds * g.value) AS w
    FROM ganesha_offsets g CROSS JOIN ganesha_pace p CROSS JOIN buckets b
),
histograms AS (
    SELECT series, peers, tick, make_array(
               sum(CASE WHEN label = 0 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 1 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 2 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 3 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 4 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 5 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 6 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 7 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 8 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 9 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 10 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 11 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 12 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 13 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 14 THEN w ELSE 0.0 END),
               sum(CASE WHEN label = 15 THEN w ELSE 0.0 END)) AS hist
    FROM ticked GROUP BY series, peers, tick
),
-- An alarm: enough hosts at the tick, and this one far from more than half of them (a peer
-- score above 0.5), one GROUP BY per tick as in salsa_fingerpoint. Hosts that behave alike
-- in a group of their own are not outliers: a small rack takes most of a large rack's block
-- replicas (HDFS puts a block's second and third copies on another rack), an older hardware
-- class is slower. A faulty host is near none of its peers, or one by chance. (Where its fault
-- slows its partners alike, as packet loss does at 50 nodes, it has company: the data flow and
-- failed fetches name it.)
compared AS (
    SELECT tick, count(*) AS hosts, unnest(peer_scores(series, hist, $threshold)) AS peer
    FROM histograms GROUP BY peers, tick
),
alarms AS (
    SELECT peer['member'] AS series, tick, hosts >= $min_hosts
           AND coalesce(peer['score'] > 0.5 AND ($near_peers = 0 OR peer['near'] < $near_peers), false)
               AS alarm
    FROM compared
)
-- ewma() starts from the first value: that value's weight is taken back, so the count starts from 0.
SELECT series, tick, alarm,
       ewma(CASE WHEN alarm THEN 1.0 ELSE 0.0 END, $ewma_alpha) OVER (PARTITION BY series ORDER BY tick)
       - power(1.0 - $ewma_alpha, row_number() OVER (PARTITION BY series ORDER BY tick))
         * first_value(CASE WHEN alarm THEN 1.0 ELSE 0.0 END) OVER (PARTITION BY series ORDER BY tick) AS level
FROM alarms;

-- Statement 5: the verdict.
WITH per_series AS (
    SELECT series, max(level) AS score, count(*) AS ticks, sum(CASE WHEN alarm THEN 1 ELSE 0 END) AS alarmed
    FROM ganesha_levels GROUP BY series
),
unknown AS (
    SELECT cluster, host, avg(CASE WHEN label = $k THEN 1.0 ELSE 0.0 END) AS unknown_share
    FROM ganesha_labels GROUP BY cluster, host
)
SELECT k.cluster, k.host, 'sadc' AS subject, p.score, p.score > $alarm_level AS indicted,
       p.ticks, p.alarmed, round(u.unknown_share, 3) AS unknown_share
FROM ganesha_series k
JOIN per_series p ON p.series = k.series
LEFT JOIN unknown u ON u.cluster = k.cluster AND u.host = k.host
ORDER BY k.cluster, p.score DESC, k.host;
