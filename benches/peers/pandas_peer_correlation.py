"""The Kahuna M45 peer-correlation study as an analyst would write it in a notebook: pandas and
numpy over the warehouse's `states` Delta table (read with the `deltalake` package).

Per job, each host's number of Maps executing is sampled at 120 evenly spaced instants of the
job's span; every host pair gets |Pearson r| (np.corrcoef); a host is similar when |r| >= 0.6
with every peer (a constant series, r undefined, is similar to nothing). Prints the jobs, hosts
and share of similar hosts, as `peer_correlation` does. Vectorised per job: one sort, then numpy
on each job's slice of the arrays.

Usage: python pandas_peer_correlation.py <warehouse>
"""

import sys

import numpy as np
from deltalake import DeltaTable

POINTS = 120
MIN_R = 0.6


def main(warehouse: str) -> None:
    states = DeltaTable(f"{warehouse}/states").to_pandas(
        columns=["cluster", "job_id", "host", "task_id", "daemon", "start_ts", "end_ts"],
        filters=[("state", "=", "Map")],
    )
    states = states.dropna(subset=["job_id", "host", "start_ts"])
    # A job's Maps from its logs where there are any, else from its job history.
    logged = states.loc[states.daemon != "history", ["cluster", "job_id"]].drop_duplicates()
    logged["logged"] = True
    states = states.merge(logged, on=["cluster", "job_id"], how="left")
    states = states[(states.daemon != "history") | states.logged.isna()]
    states["s"] = states.start_ts.astype("int64") / 1e6
    states["e"] = states.end_ts.astype("int64").where(states.end_ts.notna()) / 1e6
    maps = states.groupby(["cluster", "job_id", "host", "task_id"], sort=True).agg(s=("s", "min"), e=("e", "max"))
    maps = maps.reset_index()
    job = maps.groupby(["cluster", "job_id"], sort=False).ngroup().to_numpy()
    host = maps.host.factorize()[0]
    s, e = maps.s.to_numpy(), maps.e.to_numpy()
    bounds = np.flatnonzero(np.diff(job)) + 1
    jobs = hosts = similar = 0
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(job)]):
        js, je, jh = s[a:b], e[a:b], host[a:b]
        t0 = js.min()
        length = max(np.where(np.isnan(je), js, je).max() - t0, 0.001)
        first = np.clip(np.ceil((js - t0) / length * POINTS), 0, POINTS)
        stop = np.where(np.isnan(je), POINTS, np.clip(np.ceil((je - t0) / length * POINTS), 0, POINTS))
        names, row = np.unique(jh, return_inverse=True)
        if len(names) < 2:
            continue
        delta = np.zeros((len(names), POINTS + 1))
        keep = first < stop
        np.add.at(delta, (row[keep], first[keep].astype(int)), 1.0)
        np.add.at(delta, (row[keep], stop[keep].astype(int)), -1.0)
        running = np.cumsum(delta[:, :POINTS], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.abs(np.corrcoef(running))
        np.fill_diagonal(r, np.inf)
        lowest = np.where(np.isnan(r), -1.0, r).min(axis=1)
        jobs += 1
        hosts += len(names)
        similar += int((lowest >= MIN_R).sum())
    share = similar / hosts if hosts else 0.0
    print(f"jobs {jobs} hosts {hosts} similar_hosts {similar} share_similar {share:.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
