-- Ganesha training: the K behaviour profiles of fault-free sadc-vectors (Ganesha §4.1).
--
-- Fits a mixture of $k Gaussians (EM seeded by the best of several K-means runs, equal priors)
-- to the 14-metric sadc-vectors of a window the operator knows was fault-free, and saves it as
-- one row of the table `ganesha_models` (partition: the cluster and the run date; a rerun for
-- the same date replaces it). `ganesha_bb` classifies new vectors with the newest model.
--
-- @param from            timestamp = null   fault-free window start (null: all history)
-- @param to              timestamp = null   fault-free window end
-- @param cluster         text      = null   cluster the model is for, and trained on (null: every cluster, saved as 'default')
-- @param train_clusters  text      = null   comma-separated clusters to train on instead (null: $cluster, or all)
-- @param exclude         text      = null   comma-separated cluster/host pairs left out (hosts found outlying)
-- @param k               integer   = 7      profiles (Ganesha's elbow: 7)
-- @param seed            integer   = 42     K-means seed, for a reproducible model
-- @output table ganesha_models
--
-- Output (one row): k, samples, hosts, trained_from, trained_to, model (the gmm_fit struct:
-- k, dims, means, variances, max_d2, rows).

SELECT $k AS k, count(*) AS samples, count(DISTINCT host) AS hosts,
       min(ts) AS trained_from, max(ts) AS trained_to,
       gmm_fit($k, cpu_user_pct, cpu_system_pct, cpu_iowait_pct, cswch_s, runq_sz, plist_sz, ldavg_1,
               rx_kb_s, tx_kb_s, pgpgin_s, pgpgout_s, fault_s, bread_s, bwrtn_s, $seed) AS model
FROM sadc
WHERE (CASE WHEN $train_clusters IS NULL THEN $cluster IS NULL OR cluster = $cluster
            ELSE array_has(string_to_array($train_clusters, ','), cluster) END)
  AND ($from IS NULL OR (date >= CAST($from AS DATE) AND ts >= $from))
  AND ($to IS NULL OR (date <= CAST($to AS DATE) AND ts < $to))
  AND ($exclude IS NULL OR NOT array_has(string_to_array($exclude, ','), concat(cluster, '/', host)));
