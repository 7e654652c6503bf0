-- Ganesha / Kahuna-BB: the host whose black-box behaviour differs from its peers' (Ganesha §4).
--
-- Each sadc-vector is classified into one of the $k profiles of the newest `ganesha_models`
-- row (see ganesha_train.sql), or as unknown. Every $step_seconds, each host's label histogram
-- over the last $memory_seconds, decayed exponentially with age, is compared with its peers'
-- (square-root Jensen-Shannon distance); farther than $threshold from more than (n-1)/2 peers
-- raises an alarm. The alarms' exponentially weighted count (weight $ewma_alpha) indicts the
-- host once it exceeds $alarm_level.
--
-- @param from            timestamp = null   window start (null: all history)
-- @param to              timestamp = null   window end
-- @param cluster         text      = null   cluster (null: each cluster on its own)
-- @param model_cluster   text      = null   whose model to use (null: the newest model of any cluster)
-- @param k               integer   = 7      profiles in the model (as trained)
-- @param step_seconds    number    = 5      seconds between comparisons
-- @param memory_seconds  number    = 60     samples older than this weigh nothing
-- @param lambda          number    = 0.05   decay rate per second
-- @param threshold       number    = 0.4    distance above which two hosts differ
-- @param ewma_alpha      number    = 0.2    weight of the newest alarm in the alarm count
-- @param alarm_level     number    = 0.6    weighted alarm count that indicts
-- @param min_hosts       integer   = 3      hosts needed at a tick for a comparison
-- @output verdict
-- @tune threshold = 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6
--
-- Output: cluster, host, subject ('sadc'), score (highest weighted alarm count), indicted,
-- ticks (compared), alarmed (ticks with an alarm), unknown_share (vectors no profile explains).

WITH model AS (
    SELECT model FROM ganesha_models
    WHERE ($model_cluster IS NULL OR cluster = $model_cluster)
    ORDER BY date DESC, trained_to DESC
    LIMIT 1
),
labelled AS (
    SELECT s.cluster, s.host, date_part('epoch', s.ts) AS t,
           gmm_classify(m.model, s.cpu_user_pct, s.cpu_system_pct, s.cpu_iowait_pct, s.cswch_s, s.runq_sz,
                        s.plist_sz, s.ldavg_1, s.rx_kb_s, s.tx_kb_s, s.pgpgin_s, s.pgpgout_s, s.fault_s,
                        s.bread_s, s.bwrtn_s) AS label
    FROM sadc s CROSS JOIN model m
    WHERE ($cluster IS NULL OR s.cluster = $cluster)
      AND ($from IS NULL OR (s.date >= CAST($from AS DATE) AND s.ts >= $from))
      AND ($to IS NULL OR (s.date <= CAST($to AS DATE) AND s.ts < $to))
      AND s.host IS NOT NULL
),
-- Each vector belongs to the histograms of the ticks within $memory_seconds after it.
ticked AS (
    SELECT l.cluster, l.host, l.t, l.label,
           (floor(l.t / $step_seconds) + 1 + g.value) * $step_seconds AS tick
    FROM labelled l
    CROSS JOIN generate_series(0, CAST(ceil($memory_seconds / $step_seconds) AS BIGINT) - 1) AS g
    WHERE l.label IS NOT NULL
),
histograms AS (
    SELECT cluster, host, tick, decayed_histogram(label, $k, t, $lambda) AS hist
    FROM ticked GROUP BY cluster, host, tick
),
alarms AS (
    SELECT cluster, host, tick,
           count(*) OVER (PARTITION BY cluster, tick) AS hosts,
           indict(hist, $threshold) OVER (PARTITION BY cluster, tick) AS alarm
    FROM histograms
),
weighted AS (
    SELECT cluster, host, tick, alarm AND hosts >= $min_hosts AS alarm,
           ewma(coalesce(alarm AND hosts >= $min_hosts, false), $ewma_alpha)
               OVER (PARTITION BY cluster, host ORDER BY tick) AS level
    FROM alarms
),
unknown AS (
    SELECT cluster, host, avg(CASE WHEN label = $k THEN 1.0 ELSE 0.0 END) AS unknown_share
    FROM labelled GROUP BY cluster, host
)
SELECT w.cluster, w.host, 'sadc' AS subject, max(w.level) AS score,
       max(w.level) > $alarm_level AS indicted,
       count(*) AS ticks, sum(CASE WHEN w.alarm THEN 1 ELSE 0 END) AS alarmed,
       round(max(u.unknown_share), 3) AS unknown_share
FROM weighted w LEFT JOIN unknown u ON u.cluster = w.cluster AND u.host = w.host
GROUP BY w.cluster, w.host
ORDER BY w.cluster, score DESC, w.host;
