"""The Kahuna M45 study from Python (Kahuna §IV): are a job's nodes alike?

Each host's number of Maps executing over a job's life, sampled at 120 instants, is compared
with every peer's (|Pearson r|); a host is similar when |r| >= 0.6 with every peer. The paper
found 89% of nodes similar in successful jobs and 43% in failed ones. Over the simulated M45
history:

    kahuna simulate --history m45 --months 5 --no-logs --out runs/m45
    kahuna ingest runs/m45 --cluster m45
    python python/examples/m45_correlation.py warehouse

`kahuna diagnose peer_correlation` runs the same study as a saved query.
"""

import sys

import kahuna

ctx = kahuna.connect(sys.argv[1] if len(sys.argv) > 1 else "warehouse")

# One row per job and host: its lowest |r| with any peer of the job. The rows of one Map
# attempt (task_id) are one interval, from its first start to its last end.
hosts = ctx.sql("""
    WITH compared AS (
        SELECT job_id,
               unnest(concurrency_peer_pearson(host, date_part('epoch', start_ts), date_part('epoch', end_ts),
                                               120, task_id)) AS r
        FROM states
        WHERE state = 'Map' AND job_id IS NOT NULL AND host IS NOT NULL AND start_ts IS NOT NULL
        GROUP BY job_id
    ),
    -- One outcome per job, though its history may have been ingested twice.
    outcomes AS (
        SELECT job_id, first_value(outcome ORDER BY finish_ts DESC NULLS LAST, outcome) AS outcome
        FROM jobs GROUP BY job_id
    )
    SELECT c.job_id, coalesce(j.outcome, 'UNKNOWN') AS outcome, c.r['lowest_abs_r'] AS lowest_r
    FROM compared c LEFT JOIN outcomes j ON j.job_id = c.job_id
""").to_pandas()

hosts["similar"] = hosts["lowest_r"].fillna(0) >= 0.6
study = hosts.groupby("outcome").agg(
    jobs=("job_id", "nunique"), hosts=("similar", "size"), similar_hosts=("similar", "sum")
)
study["share_similar"] = (study["similar_hosts"] / study["hosts"]).round(3)
print(study.to_string())
