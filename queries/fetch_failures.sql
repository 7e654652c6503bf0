-- Failed shuffle fetches: the reduce stuck on a map output its peers fetched, and the node
-- whose transfers fail with most of its peers.
--
-- A reduce copies one output of every map of its job (ReduceCopy states); a try that fails is
-- tried again after a backoff. A healthy cluster fails a try now and then (a busy TaskTracker,
-- a reset connection), so only outputs a reduce failed to fetch $retries times count, the
-- outputs Hadoop's reduce reports to the JobTracker. Which end of them is at fault is a peer
-- comparison, as Hadoop's own fetch-failure accounting makes it:
--
-- * A reduce that kept failing to fetch one map output after reporting it (more than $retries
--   failed tries) and never fetched it, while other reduces fetched that same output, is stuck
--   at its own end: the map's node served it. This is HADOOP-1152 (the rename of a fetched
--   output fails in the reduce's in-memory file system, the copier retries and fails again,
--   and the reduce stays silent in its copy phase until a speculative backup wins or the task
--   timeout kills it). Its durations look normal, as the backup ends it early, and it uses no
--   resources, so neither the peer comparisons of durations nor the black box see it; its
--   failed copies are what it leaves. (A reduce killed just after reporting an output, its
--   backup having won, fetched no more of it either: a healthy cluster has those too.)
-- * A node whose reported outputs (fetching or serving) in one job involve three nodes or more,
--   and either more than $partner_share of the job's other nodes or more than $output_share of
--   the job's reported outputs, is the failing end of all of them: packet loss on one node fails
--   transfers with everyone, while each of its partners fails with it alone (Hadoop's
--   JobTracker, too, re-runs a map once three reduces, and from 0.20 half of the job's running
--   ones, have reported it). On a large cluster a lossy node meets only some of its peers in a
--   job, but it is still an end of nearly every reported output, and each partner of one or
--   two. A stuck output whose map's node is such a node is not counted against the reduce.
--
-- @param from           timestamp = null   copies starting at or after this time (null: all history)
-- @param to             timestamp = null   copies starting before this time (null: no end)
-- @param cluster        text      = null   cluster (null: every cluster, each on its own)
-- @param retries        integer   = 2      failed tries of one map output after which a reduce reports it (Hadoop: 2, more for longer maps)
-- @param partner_share  number    = 0.5    share of a job's other nodes a node's reported outputs involve, above which it is the failing end
-- @param output_share   number    = 0.5    share of a job's reported outputs a node is an end of, above which it is the failing end
-- @output verdict
--
-- Output, per host that copied or served map outputs: cluster, host, subject ('shuffle/lossy'
-- for the failing end of a job's reported outputs, else 'shuffle'), score (the largest share of
-- its peers its reported outputs involve in one job, a job where it is the failing end if there
-- is one), indicted, stuck (outputs it gave up on while its peers fetched them), failed (failed
-- tries of reported outputs between it and another node, either way, in all jobs), partners
-- (the nodes at their other end in that job), peers (the job's other nodes).

-- Statement 1: the nodes between which each job's outputs were copied (the intermediate
-- results are tables of this run's session, so that each is computed once).
CREATE TABLE fetch_pairs AS
SELECT cluster, coalesce(job_id, '') AS job, host, peer_host
FROM states
WHERE state = 'ReduceCopy' AND host IS NOT NULL AND peer_host IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
GROUP BY cluster, coalesce(job_id, ''), host, peer_host;

-- Statement 2: the map outputs a reduce attempt failed to fetch $retries times: reported.
CREATE TABLE fetch_reported AS
SELECT cluster, coalesce(job_id, '') AS job, host, task_id, peer_task_id, peer_host, count(*) AS failed
FROM states
WHERE state = 'ReduceCopy' AND outcome = 'FAILED' AND host IS NOT NULL AND peer_host IS NOT NULL
  AND peer_task_id IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
GROUP BY cluster, coalesce(job_id, ''), host, task_id, peer_task_id, peer_host
HAVING count(*) >= $retries;

-- Statement 3: the verdict. Partners are counted job by job, as Hadoop counts reports per job:
-- over a long window a healthy cluster's rare reported outputs join every pair of nodes, while a
-- lossy node's join it to most of its peers within one job.
WITH job_nodes AS (
    SELECT cluster, job, host FROM fetch_pairs
    UNION
    SELECT cluster, job, peer_host FROM fetch_pairs
),
-- Each end of reported outputs between two nodes, with the other end as its partner.
failed_ends AS (
    SELECT cluster, job, host, peer_host AS partner, failed FROM fetch_reported WHERE peer_host <> host
    UNION ALL
    SELECT cluster, job, peer_host, host, failed FROM fetch_reported WHERE peer_host <> host
),
job_failing AS (
    SELECT n.cluster, n.job, n.host, coalesce(sum(f.failed), 0) AS failed, count(DISTINCT f.partner) AS partners,
           count(*) OVER (PARTITION BY n.cluster, n.job) - 1 AS peers, count(f.partner) AS outputs,
           sum(count(f.partner)) OVER (PARTITION BY n.cluster, n.job) / 2 AS reported
    FROM job_nodes n LEFT JOIN failed_ends f ON f.cluster = n.cluster AND f.job = n.job AND f.host = n.host
    GROUP BY n.cluster, n.job, n.host
),
-- Each node's job where it is most plainly the failing end (the failing end there, then the
-- largest share of partners), and its failed tries in all.
failing AS (
    SELECT cluster, host, failed, partners, peers, share, lossy
    FROM (
        SELECT cluster, host, sum(failed) OVER (PARTITION BY cluster, host) AS failed, partners, peers, share, lossy,
               row_number() OVER (PARTITION BY cluster, host ORDER BY lossy DESC, share DESC, peers DESC, job) AS pick
        FROM (
            SELECT *, partners >= 3
                      AND (share > $partner_share OR outputs > $output_share * reported) AS lossy
            FROM (
                SELECT *, CASE WHEN peers > 0 THEN CAST(partners AS DOUBLE) / peers ELSE 0 END AS share
                FROM job_failing
            ) s
        ) j
    ) t
    WHERE pick = 1
),
-- Who fetched each reported output in the end: the attempt that reported it, or its peers.
fetched AS (
    SELECT g.cluster, g.task_id, g.peer_task_id,
           sum(CASE WHEN s.task_id = g.task_id THEN 1 ELSE 0 END) AS by_itself,
           sum(CASE WHEN s.task_id <> g.task_id THEN 1 ELSE 0 END) AS by_peers
    FROM fetch_reported g
    JOIN states s ON s.cluster = g.cluster AND s.peer_task_id = g.peer_task_id
    WHERE s.state = 'ReduceCopy' AND s.outcome = 'SUCCEEDED'
      AND ($cluster IS NULL OR s.cluster = $cluster)
      AND ($from IS NULL OR (s.date >= CAST($from AS DATE) AND s.start_ts >= $from))
      AND ($to IS NULL OR (s.date <= CAST($to AS DATE) AND s.start_ts < $to))
    GROUP BY g.cluster, g.task_id, g.peer_task_id
),
stuck AS (
    SELECT g.cluster, g.host, count(*) AS stuck
    FROM fetch_reported g
    JOIN fetched x ON x.cluster = g.cluster AND x.task_id = g.task_id AND x.peer_task_id = g.peer_task_id
    JOIN failing m ON m.cluster = g.cluster AND m.host = g.peer_host
    WHERE g.failed > $retries AND x.by_itself = 0 AND x.by_peers > 0 AND NOT m.lossy
    GROUP BY g.cluster, g.host
)
SELECT f.cluster, f.host, CASE WHEN f.lossy THEN 'shuffle/lossy' ELSE 'shuffle' END AS subject, f.share AS score,
       coalesce(s.stuck, 0) > 0 OR f.lossy AS indicted,
       coalesce(s.stuck, 0) AS stuck, f.failed, f.partners, f.peers
FROM failing f LEFT JOIN stuck s ON s.cluster = f.cluster AND s.host = f.host
ORDER BY f.cluster, indicted DESC, score DESC, f.host;
