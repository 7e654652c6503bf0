"""One `jsd_sqrt` call per row over a million pairs of 20-bin histograms: from Python through
the FFI (PyPI's datafusion with kahuna.register_all), in `kahuna sql`, and scipy's
`jensenshannon` over the same numbers as NumPy arrays (vectorised along the rows, base 2).

    python python/benches/jsd_sqrt.py KAHUNA_BIN [RUNS]

Run it with the package built in release (`maturin develop --release -m python/Cargo.toml`)
and a release `kahuna`. Prints the median wall and CPU seconds of RUNS runs of each, and each
one's sum of distances (they must agree).
"""

import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datafusion
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.spatial.distance import jensenshannon

import kahuna

ROWS, BINS = 1_000_000, 20
QUERY = "SELECT sum(jsd_sqrt(p, q)) AS total FROM pairs"


def histograms(rng: np.random.Generator) -> np.ndarray:
    counts = rng.poisson(rng.uniform(0.5, 20, size=(ROWS, 1)), size=(ROWS, BINS)).astype(np.float64)
    counts[counts.sum(axis=1) == 0, 0] = 1.0  # no empty histogram: scipy would give NaN
    return counts


def as_lists(values: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(np.arange(0, ROWS * BINS + 1, BINS, dtype=np.int32), values.ravel())


def measure(run, runs: int):
    walls, cpus, result = [], [], None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def main() -> None:
    kahuna_bin, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    rng = np.random.default_rng(7)
    p, q = histograms(rng), histograms(rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pairs.parquet"
        pq.write_table(pa.table({"p": as_lists(p), "q": as_lists(q)}), path)

        ctx = datafusion.SessionContext()
        kahuna.register_all(ctx)
        ctx.register_parquet("pairs", str(path))
        python = measure(lambda: ctx.sql(QUERY).to_pydict()["total"][0], runs)

        def kahuna_sql():
            # The statement's own time, as `kahuna sql` prints it; CPU of the whole process.
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            script = f"CREATE EXTERNAL TABLE pairs STORED AS PARQUET LOCATION '{path}'; {QUERY}"
            done = subprocess.run(
                [kahuna_bin, "--warehouse", tmp, "sql", "-c", script], check=True, capture_output=True, text=True
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = done.stdout
            seconds = float(re.findall(r"in ([0-9.]+) s", done.stderr)[-1])
            total = float(re.search(r"\|\s*([0-9.]+)\s*\|", out.split("total")[1]).group(1))
            return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, total

        sql = [kahuna_sql() for _ in range(runs)]
        sql = (
            statistics.median(s[0] for s in sql),
            statistics.median(s[1] for s in sql),
            sql[-1][2],
        )
        scipy = measure(lambda: float(jensenshannon(p, q, axis=1, base=2).sum()), runs)

    print(f"{ROWS} rows of {BINS} bins, median of {runs} runs")
    print(f"{'':<34} {'wall s':>7} {'CPU s':>7}  sum of distances")
    for name, (wall, cpu, total) in [
        ("datafusion (PyPI) + kahuna, FFI", python),
        ("kahuna sql", sql),
        ("scipy jensenshannon, NumPy", scipy),
    ]:
        print(f"{name:<34} {wall:>7.3f} {cpu:>7.3f}  {total:.6f}")


if __name__ == "__main__":
    main()
