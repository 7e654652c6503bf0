-- One verdict per host from white-box and black-box evidence together (Kahuna §VIII-C).
--
-- Reads the newest recorded run, for the same cluster and window, of each diagnosis in
-- `diagnoses`: Kahuna-WB (kahuna_wb), SALSA peer comparison and SALSA data flow
-- (salsa_fingerpoint), Ganesha (ganesha_bb), failed shuffle fetches (fetch_failures) and silent
-- attempts (hung_tasks); run those first (the scheduler runs this one last). Each indicting source gives the host its
-- weight; a host is indicted at $min_votes. Kahuna-WB's per-host verdict counts, not its per-job
-- rows.
--
-- One vote is enough by default: each source is tuned to keep its own false alarms rare, and
-- some faults show in one source only (a hung task in its silence: it uses no resources, so
-- Ganesha cannot see it, and a backup ends it as it would a straggler; a reduce stuck on a map
-- output its peers fetched, in its failed copies alone). Peer comparisons blame the healthy partners of a
-- host with a correlated fault (packet loss slows everyone who talks to it); the data flow
-- blames the host they have in common, so its weight alone can indict, and where it indicts
-- someone, other hosts need one more vote. So do they where failed fetches name the failing end
-- of a job's transfers (a 'shuffle/lossy' verdict), and their block operations are no vote: its
-- partners' black boxes, durations and block operations misbehave with it, and at 50 nodes its
-- partners are most of the cluster. A host's own silent attempt needs no more: a faulty partner
-- slows a task, it does not silence it.
--
-- Block operations (ReadBlock, WriteBlock) are where a correlated fault spreads: packet loss or
-- a slow disk on one node slows the block operations of every node that reads from it or writes
-- through it, and the data flow does not always name the culprit (at 50 nodes it often finds
-- too few outliers). So an indictment resting on block operations alone (Kahuna-WB's verdict
-- over the window's DataNode states, SALSA's ReadBlock and WriteBlock comparisons) is a vote
-- only beside the black box or the data flow: the culprit's own resources misbehave, its
-- partners' do not. Kahuna-WB's verdict from the jobs, and SALSA's Map comparison, vote alone.
--
-- @param from             timestamp = null   the window the runs covered (null: newest runs, any window)
-- @param to               timestamp = null   (as given to those runs)
-- @param cluster          text      = null   cluster (null: each cluster on its own)
-- @param wb_weight        number    = 1      weight of a Kahuna-WB indictment
-- @param salsa_weight     number    = 1      weight of a SALSA peer-comparison indictment
-- @param dataflow_weight  number    = 2      weight of a SALSA data-flow indictment
-- @param bb_weight        number    = 1      weight of a Ganesha indictment
-- @param shuffle_weight   number    = 1      weight of a failed-fetches indictment
-- @param hang_weight      number    = 1      weight of a silent attempt's indictment
-- @param blocks_weight    number    = 1      weight of block-operation indictments (only beside Ganesha or the data flow)
-- @param wb_job_share     number    = 0.5    Kahuna-WB's $job_share: from it on, its host verdict rests on the jobs
-- @param min_votes        number    = 1      weight that indicts
-- @output verdict
-- @tune min_votes = 1, 2, 3
--
-- Output: cluster, host, subject ('combined'), score (the host's weight), indicted, and which
-- sources indicted it: wb, salsa, blocks, dataflow, bb, shuffle, hang (each the number of
-- indicting rows).

WITH runs AS (
    SELECT r.cluster, r.query, r.run_id,
           row_number() OVER (PARTITION BY r.cluster, r.query ORDER BY r.ran_at DESC, r.run_id DESC) AS newest
    FROM (SELECT DISTINCT d.cluster, d.query, d.run_id, d.ran_at FROM diagnoses d
          WHERE d.query IN ('kahuna_wb', 'salsa_fingerpoint', 'ganesha_bb', 'fetch_failures', 'hung_tasks')
            AND ($cluster IS NULL OR d.cluster = $cluster)
            AND ($from IS NULL OR d.window_from = $from)
            AND ($to IS NULL OR d.window_to = $to)) AS r
),
evidence AS (
    SELECT d.cluster, d.host,
           -- The host verdict's score is its share of the blame of the jobs that indict anyone.
           sum(CASE WHEN d.query = 'kahuna_wb' AND d.indicted AND d.job_id IS NULL AND d.subject = 'host'
                     AND d.score >= $wb_job_share THEN 1 ELSE 0 END) AS wb,
           sum(CASE WHEN d.query = 'salsa_fingerpoint' AND d.indicted AND d.subject NOT LIKE '%/dataflow'
                     AND d.subject NOT IN ('ReadBlock', 'WriteBlock') THEN 1 ELSE 0 END) AS salsa,
           sum(CASE WHEN d.query IN ('kahuna_wb', 'salsa_fingerpoint') AND d.indicted AND d.job_id IS NULL
                     AND d.subject IN ('ReadBlock', 'WriteBlock') THEN 1 ELSE 0 END) AS blocks,
           sum(CASE WHEN d.query = 'salsa_fingerpoint' AND d.indicted AND d.subject LIKE '%/dataflow' THEN 1 ELSE 0 END) AS dataflow,
           sum(CASE WHEN d.query = 'ganesha_bb' AND d.indicted THEN 1 ELSE 0 END) AS bb,
           sum(CASE WHEN d.query = 'fetch_failures' AND d.indicted THEN 1 ELSE 0 END) AS shuffle,
           sum(CASE WHEN d.query = 'fetch_failures' AND d.indicted AND d.subject = 'shuffle/lossy' THEN 1 ELSE 0 END)
               AS lossy,
           sum(CASE WHEN d.query = 'hung_tasks' AND d.indicted AND d.job_id IS NULL AND d.subject = 'host' THEN 1 ELSE 0 END)
               AS hang
    -- A run without --cluster covers every cluster under one run id: join on both.
    FROM diagnoses d JOIN runs r ON r.run_id = d.run_id AND r.cluster = d.cluster AND r.newest = 1
    WHERE d.host IS NOT NULL AND ($cluster IS NULL OR d.cluster = $cluster)
    GROUP BY d.cluster, d.host
),
culprit_named AS (
    SELECT *,
           max(dataflow) OVER (PARTITION BY cluster) > 0 AS flow_points,
           max(lossy) OVER (PARTITION BY cluster) > 0 AS loss_points
    FROM evidence
),
weighed AS (
    SELECT *,
           (CASE WHEN wb > 0 THEN $wb_weight ELSE 0 END) + (CASE WHEN salsa > 0 THEN $salsa_weight ELSE 0 END)
           + (CASE WHEN dataflow > 0 THEN $dataflow_weight ELSE 0 END) + (CASE WHEN bb > 0 THEN $bb_weight ELSE 0 END)
           + (CASE WHEN shuffle > 0 THEN $shuffle_weight ELSE 0 END) + (CASE WHEN hang > 0 THEN $hang_weight ELSE 0 END)
           + (CASE WHEN blocks > 0 AND (bb > 0 OR dataflow > 0) AND NOT (loss_points AND lossy = 0)
                   THEN $blocks_weight ELSE 0 END) AS score
    FROM culprit_named
)
SELECT cluster, host, 'combined' AS subject, score,
       score >= $min_votes
                + (CASE WHEN hang = 0 AND ((flow_points AND dataflow = 0) OR (loss_points AND lossy = 0)) THEN 1 ELSE 0 END)
           AS indicted,
       wb, salsa, blocks, dataflow, bb, shuffle, hang
FROM weighed
ORDER BY cluster, score DESC, host;
