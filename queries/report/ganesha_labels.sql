-- Ganesha's evidence: each host's share of seconds in each behaviour profile, read after
-- ganesha_bb ran in the same session (its `ganesha_labels` table; label k is "unknown").
--
-- Output: host, label, share.

SELECT host, label, CAST(count(*) AS DOUBLE) / sum(count(*)) OVER (PARTITION BY host) AS share
FROM ganesha_labels
GROUP BY host, label
ORDER BY host, label
