-- SALSA's aggregate control flow (SALSA Fig. 6): ReduceCopy dependencies between TaskTrackers.
--
-- A Reduce copies each Map's output from the TaskTracker that ran the Map, so every ReduceCopy
-- is an edge from the Map's host to the Reduce's host. Summed over the window this shows
-- hotspots (a host every Reduce waits on) and how evenly the work was spread; a slow edge
-- points at a slow source or a bad link. Saved as `controlflow_edges`, one partition per
-- cluster and run date.
--
-- @param from     timestamp = null   copies starting at or after this time (null: all history)
-- @param to       timestamp = null   copies starting before this time
-- @param cluster  text      = null   cluster (null: every cluster)
-- @output table controlflow_edges
--
-- Output: cluster, src (the Map's TaskTracker), dst (the Reduce's), copies, failed,
-- mean_ms, max_ms, bytes.

SELECT cluster, peer_host AS src, host AS dst, count(*) AS copies,
       sum(CASE WHEN outcome = 'FAILED' THEN 1 ELSE 0 END) AS failed,
       round(avg(duration_ms), 1) AS mean_ms, max(duration_ms) AS max_ms, sum(bytes) AS bytes
FROM states
WHERE state = 'ReduceCopy' AND peer_host IS NOT NULL AND host IS NOT NULL
  AND ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
GROUP BY cluster, peer_host, host
ORDER BY cluster, copies DESC, src, dst;
