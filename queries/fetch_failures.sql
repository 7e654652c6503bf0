-- Failed shuffle fetches: the reduce stuck on a map output its peers fetched, and the node
-- whose transfers fail with most of its peers.
--
-- A reduce copies one output of every map of its job (ReduceCopy states); a copy that fails is
-- retried. Which end of a failing copy is at fault is a peer comparison, as Hadoop's own
-- fetch-failure accounting makes it:
--
-- * A reduce that failed to fetch one map output $retries times and never fetched it, while
--   other reduces fetched that same output, is stuck at its own end: the map's node served
--   it. This is HADOOP-1152 (the rename of a fetched output fails in the reduce's in-memory
--   file system, the copier retries and fails again, and the reduce stays silent in its copy
--   phase until a speculative backup wins or the task timeout kills it). Its durations look
--   normal, as the backup ends it early, and it uses no resources, so neither the peer
--   comparisons of durations nor the black box see it; its failed copies are what it leaves.
-- * A node whose failed copies (fetching or serving) involve more than $partner_share of its
--   peers is the failing end of all of them: packet loss on one node fails transfers with
--   everyone, while each of its partners fails with it alone. A stuck output whose map's node
--   is such a node is not counted against the reduce.
--
-- @param from           timestamp = null   copies starting at or after this time (null: all history)
-- @param to             timestamp = null   copies starting before this time (null: no end)
-- @param cluster        text      = null   cluster (null: every cluster, each on its own)
-- @param retries        integer   = 3      failed tries of one map output, never fetched, that make a reduce stuck
-- @param partner_share  number    = 0.5    share of its peers a node's failed copies involve, above which it is the failing end
-- @output verdict
--
-- Output, per host that copied or served map outputs: cluster, host, subject ('shuffle'),
-- score (the share of its peers its failed copies involve), indicted, stuck (outputs it gave up
-- on while its peers fetched them), failed (failed copies between it and another node, either
-- way), partners (the nodes at their other end), peers.

-- Statement 1: the copies between each pair of nodes, and how many failed (cheap columns; the
-- intermediate results are tables of this run's session, so that each is computed once).
CREATE TABLE fetch_pairs AS
SELECT cluster, host, peer_host, sum(CASE WHEN outcome = 'FAILED' THEN 1 ELSE 0 END) AS failed
FROM states
WHERE state = 'ReduceCopy' AND host IS NOT NULL AND peer_host IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
GROUP BY cluster, host, peer_host;

-- Statement 2: the map outputs a reduce attempt failed to fetch $retries times.
CREATE TABLE fetch_given_up AS
SELECT cluster, host, task_id, peer_task_id, peer_host
FROM states
WHERE state = 'ReduceCopy' AND outcome = 'FAILED' AND host IS NOT NULL AND peer_task_id IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
GROUP BY cluster, host, task_id, peer_task_id, peer_host
HAVING count(*) >= $retries;

-- Statement 3: the verdict.
WITH nodes AS (
    SELECT cluster, host FROM fetch_pairs
    UNION
    SELECT cluster, peer_host FROM fetch_pairs
),
-- Each end of failed copies between two nodes, with the other end as its partner.
failed_ends AS (
    SELECT cluster, host, peer_host AS partner, failed FROM fetch_pairs WHERE failed > 0 AND peer_host <> host
    UNION ALL
    SELECT cluster, peer_host, host, failed FROM fetch_pairs WHERE failed > 0 AND peer_host <> host
),
failing AS (
    SELECT n.cluster, n.host, coalesce(sum(f.failed), 0) AS failed, count(DISTINCT f.partner) AS partners,
           count(*) OVER (PARTITION BY n.cluster) - 1 AS peers
    FROM nodes n LEFT JOIN failed_ends f ON f.cluster = n.cluster AND f.host = n.host
    GROUP BY n.cluster, n.host
),
-- Who fetched each given-up output in the end: the attempt that gave up, or its peers.
fetched AS (
    SELECT g.cluster, g.task_id, g.peer_task_id,
           sum(CASE WHEN s.task_id = g.task_id THEN 1 ELSE 0 END) AS by_itself,
           sum(CASE WHEN s.task_id <> g.task_id THEN 1 ELSE 0 END) AS by_peers
    FROM fetch_given_up g
    JOIN states s ON s.cluster = g.cluster AND s.peer_task_id = g.peer_task_id
    WHERE s.state = 'ReduceCopy' AND s.outcome = 'SUCCEEDED'
      AND ($cluster IS NULL OR s.cluster = $cluster)
      AND ($from IS NULL OR (s.date >= CAST($from AS DATE) AND s.start_ts >= $from))
      AND ($to IS NULL OR (s.date <= CAST($to AS DATE) AND s.start_ts < $to))
    GROUP BY g.cluster, g.task_id, g.peer_task_id
),
stuck AS (
    SELECT g.cluster, g.host, count(*) AS stuck
    FROM fetch_given_up g
    JOIN fetched x ON x.cluster = g.cluster AND x.task_id = g.task_id AND x.peer_task_id = g.peer_task_id
    JOIN failing m ON m.cluster = g.cluster AND m.host = g.peer_host
    WHERE x.by_itself = 0 AND x.by_peers > 0 AND m.partners <= $partner_share * m.peers
    GROUP BY g.cluster, g.host
)
SELECT f.cluster, f.host, 'shuffle' AS subject,
       CASE WHEN f.peers > 0 THEN CAST(f.partners AS DOUBLE) / f.peers ELSE 0 END AS score,
       coalesce(s.stuck, 0) > 0 OR f.partners > $partner_share * f.peers AS indicted,
       coalesce(s.stuck, 0) AS stuck, f.failed, f.partners, f.peers
FROM failing f LEFT JOIN stuck s ON s.cluster = f.cluster AND s.host = f.host
ORDER BY f.cluster, indicted DESC, score DESC, f.host;
