-- `kahuna eval`'s scores, read from its --csv file as table `eval`: per diagnosis, each
-- fault, workload and cluster size with its true- and false-positive rates; fault-free runs
-- with their false-alarm rate.
--
-- Output: query, setting, fault, tp, fp, false_alarm.

SELECT query, fault || ' ' || workload || ' ×' || CAST(nodes AS VARCHAR) AS setting, fault,
       CAST(tp AS DOUBLE) AS tp, CAST(fp AS DOUBLE) AS fp, CAST(false_alarm AS DOUBLE) AS false_alarm
FROM eval
ORDER BY query, fault = 'none' DESC, fault, workload, nodes
