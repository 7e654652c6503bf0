-- SALSA's aggregate data flow (SALSA Fig. 8): block operations between DataNodes.
--
-- Every ReadBlock is an edge from the serving DataNode to its reader, every WriteBlock an edge
-- from the writer to the DataNode, and a WriteBlock_Replicated adds an edge on to the mirror
-- of the pipeline. Peers are named by address in DataNode logs; they are mapped back to host
-- names through the addresses DataNodes give themselves (the `addresses` table: the start of
-- a write to it, a block it served, its end of a transfer in clienttrace). A node that only
-- ever served blocks is named too, not left as a bare address. Summed over the window this
-- shows imbalances of data access and, with mean durations, which links or nodes are slow.
-- An edge from a node to itself is local I/O: a task reading or writing through the DataNode
-- of its own node (HDFS puts the first replica there).
-- Saved as `dataflow_edges`, one partition per cluster and run date.
--
-- @param from     timestamp = null   operations starting at or after this time (null: all history)
-- @param to       timestamp = null   operations starting before this time
-- @param cluster  text      = null   cluster (null: every cluster)
-- @output table dataflow_edges
--
-- Output: cluster, src, dst, op (read, write, write_replicated, mirror), blocks, mean_ms,
-- max_ms, bytes.

-- Statement 1: each DataNode's own addresses, as its lines name them (`addresses`). The
-- intermediate results are tables of this run's session: DataFusion reads a table again for
-- every mention of a WITH name, and the edges below mention the named operations four times.
CREATE TABLE dataflow_peer_names AS
SELECT DISTINCT cluster, host, address
FROM addresses
WHERE ($cluster IS NULL OR cluster = $cluster)
  AND ($from IS NULL OR date >= CAST($from AS DATE) - INTERVAL '1 day')
  AND ($to IS NULL OR date <= CAST($to AS DATE));

-- Statement 2: the block operations of the window, their peers and mirrors named.
CREATE TABLE dataflow_named AS
WITH ops AS (
    SELECT cluster, host, state, peer_host, mirror_host, duration_ms, bytes
    FROM states
    WHERE daemon = 'datanode' AND state IN ('ReadBlock', 'WriteBlock', 'WriteBlock_Replicated')
      AND host IS NOT NULL AND peer_host IS NOT NULL
      AND ($cluster IS NULL OR cluster = $cluster)
      AND ($from IS NULL OR (date >= CAST($from AS DATE) AND start_ts >= $from))
      AND ($to IS NULL OR (date <= CAST($to AS DATE) AND start_ts < $to))
)
SELECT o.cluster, o.host, o.state, coalesce(p.host, o.peer_host) AS peer,
       coalesce(m.host, o.mirror_host) AS mirror, o.duration_ms, o.bytes
FROM ops o
LEFT JOIN dataflow_peer_names p ON p.cluster = o.cluster AND p.address = o.peer_host
LEFT JOIN dataflow_peer_names m ON m.cluster = o.cluster AND m.address = o.mirror_host;

-- Statement 3: the edges.
WITH edges AS (
    SELECT cluster, host AS src, peer AS dst, 'read' AS op, duration_ms, bytes FROM dataflow_named WHERE state = 'ReadBlock'
    UNION ALL
    SELECT cluster, peer, host, 'write', duration_ms, bytes FROM dataflow_named WHERE state = 'WriteBlock'
    UNION ALL
    SELECT cluster, peer, host, 'write_replicated', duration_ms, bytes FROM dataflow_named WHERE state = 'WriteBlock_Replicated'
    UNION ALL
    SELECT cluster, host, mirror, 'mirror', duration_ms, bytes FROM dataflow_named
    WHERE state = 'WriteBlock_Replicated' AND mirror IS NOT NULL
)
SELECT cluster, src, dst, op, count(*) AS blocks, round(avg(duration_ms), 1) AS mean_ms,
       max(duration_ms) AS max_ms, sum(bytes) AS bytes
FROM edges
GROUP BY cluster, src, dst, op
ORDER BY cluster, op, blocks DESC, src, dst;
