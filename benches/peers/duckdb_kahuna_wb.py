"""Kahuna-WB over Map states in DuckDB SQL, as a DuckDB user would write it, reading the Parquet
files of the warehouse's `states` Delta table (its current files, listed by the `deltalake`
package: DuckDB's own Delta reader is an extension fetched from the network).

Per job, each Map's duration is divided by the job's median Map duration; each host's
durations become a 32-bin log-spaced histogram over [0.1, 10] of that ratio, each Map weighing
its ratio (where the host's time went); every host pair of the job gets the square-root
Jensen-Shannon distance of their normalised histograms; a host is alarmed in a job when it is
farther than 0.5 from more than half of its peers (jobs of 3 hosts or more, hosts of 2 Maps or
more) and its Maps took longer than the median. Prints the host-jobs compared and alarmed.

Usage: python duckdb_kahuna_wb.py <warehouse> <threads>
"""

import sys

import duckdb
from deltalake import DeltaTable

BINS = 32

SQL = f"""
CREATE TEMP TABLE maps AS
WITH m AS (
    SELECT job_id, host, daemon, CAST(duration_ms AS DOUBLE) AS ms
    FROM read_parquet($files)
    WHERE state = 'Map' AND job_id IS NOT NULL AND host IS NOT NULL AND duration_ms IS NOT NULL
),
logged AS (SELECT DISTINCT job_id FROM m WHERE daemon <> 'history')
SELECT m.job_id, m.host, m.ms FROM m LEFT JOIN logged l USING (job_id)
WHERE m.daemon <> 'history' OR l.job_id IS NULL;

CREATE TEMP TABLE hists AS
WITH med AS (SELECT job_id, median(ms) AS med FROM maps GROUP BY job_id),
ratios AS (
    SELECT job_id, host, ms / greatest(med, 0.001) AS ratio FROM maps JOIN med USING (job_id)
),
hosts AS (
    SELECT job_id, host, avg(ratio) AS slowdown FROM ratios GROUP BY job_id, host HAVING count(*) >= 2
),
binned AS (
    SELECT job_id, host,
           CAST(least({BINS - 1}, greatest(0, floor((ln(greatest(ratio, 1e-300)) - ln(0.1)) / (ln(10) - ln(0.1)) * {BINS}))) AS INTEGER) AS bin,
           sum(ratio) AS w
    FROM ratios JOIN hosts USING (job_id, host) GROUP BY ALL
),
cells AS (
    SELECT h.job_id, h.host, b.bin, coalesce(x.w, 0) AS w
    FROM hosts h CROSS JOIN range({BINS}) b(bin)
    LEFT JOIN binned x ON x.job_id = h.job_id AND x.host = h.host AND x.bin = b.bin
)
SELECT c.job_id, c.host, any_value(h.slowdown) AS slowdown, sum(c.w) AS total, list(c.w ORDER BY c.bin) AS w
FROM cells c JOIN hosts h USING (job_id, host) GROUP BY c.job_id, c.host HAVING sum(c.w) > 0;

CREATE TEMP TABLE pairs AS
WITH p AS (SELECT job_id, host, slowdown, list_transform(w, lambda x: x / total) AS p FROM hists)
SELECT a.job_id, a.host AS a, b.host AS b,
       sqrt(greatest(0, list_sum(list_transform(list_zip(a.p, b.p), lambda z:
           CASE WHEN z[1] > 0 THEN 0.5 * z[1] * log2(2 * z[1] / (z[1] + z[2])) ELSE 0 END
         + CASE WHEN z[2] > 0 THEN 0.5 * z[2] * log2(2 * z[2] / (z[1] + z[2])) ELSE 0 END)))) AS d
FROM p a JOIN p b ON a.job_id = b.job_id AND a.host < b.host;

WITH both_ways AS (
    SELECT job_id, a AS host, d FROM pairs UNION ALL SELECT job_id, b AS host, d FROM pairs
),
scored AS (
    SELECT job_id, host, avg(CASE WHEN d > 0.5 THEN 1.0 ELSE 0.0 END) AS score, count(*) AS peers
    FROM both_ways GROUP BY job_id, host
)
SELECT count(*) AS compared,
       sum(CASE WHEN s.score > 0.5 AND s.peers >= 2 AND h.slowdown > 1 THEN 1 ELSE 0 END) AS alarmed
FROM scored s JOIN hists h USING (job_id, host);
"""


def main(warehouse: str, threads: str) -> None:
    files = DeltaTable(f"{warehouse}/states").file_uris()
    con = duckdb.connect()
    con.execute(f"SET threads = {int(threads)}")
    statements = [s for s in SQL.split(";") if s.strip()]
    for statement in statements[:-1]:
        con.execute(statement, {"files": files} if "$files" in statement else None)
    compared, alarmed = con.execute(statements[-1]).fetchone()
    print(f"compared {compared} alarmed {alarmed}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
