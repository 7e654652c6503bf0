"""The Python package against PyPI's datafusion: the crate README's examples, a warehouse read
through `connect` beside `kahuna sql`, and bad input. `tests/python.rs` runs it with KAHUNA_BIN
set to the `kahuna` binary of the same build."""

from __future__ import annotations

import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import datafusion
import pyarrow.parquet as pq
import pytest
from datafusion import col, lit

import kahuna

REPO = Path(__file__).resolve().parents[2]
README_SLT = REPO / "udfs" / "tests" / "slt" / "readme.slt"


def kahuna_bin() -> str:
    path = os.environ.get("KAHUNA_BIN")
    if not path:
        pytest.skip("KAHUNA_BIN names no kahuna binary (tests/python.rs sets it)")
    return path


# The .slt runner's formatting (udfs/tests/sqllogictests.rs): floats rounded to 9 decimals in
# their shortest form, lists as [a, b], structs as {name: value}.
def formatted(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = f"{round(value, 9):.9f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    if isinstance(value, list):
        return "[" + ", ".join(formatted(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {formatted(v)}" for k, v in value.items()) + "}"
    return str(value)


def readme_records() -> list[tuple[str, str, list[str]]]:
    """The examples of udfs/README.md as the .slt file gives them: (kind, sql, expected rows)."""
    records = []
    for block in README_SLT.read_text().split("\n\n"):
        lines = [line for line in block.strip().splitlines() if not line.startswith("#")]
        if not lines:
            continue
        head, body = lines[0], lines[1:]
        if head.startswith("statement"):
            records.append(("statement", "\n".join(body), []))
        elif head.startswith("query"):
            split = body.index("----")
            records.append(("query", "\n".join(body[:split]), body[split + 1 :]))
    return records


def normalised(line: str) -> str:
    return re.sub(r"\s+", " ", line.strip())


def test_every_function_of_the_crate_readme_gives_its_readme_result():
    ctx = datafusion.SessionContext()
    kahuna.register_all(ctx)
    records = readme_records()
    queries = [r for r in records if r[0] == "query"]
    assert len(queries) >= 15, f"{README_SLT} holds {len(queries)} queries"
    called = set()
    for kind, sql, expected in records:
        result = ctx.sql(sql)
        if kind == "statement":
            result.collect()
            continue
        rows = result.to_arrow_table().to_pylist()
        got = [" ".join(formatted(v) for v in row.values()) for row in rows]
        assert [normalised(g) for g in got] == [normalised(e) for e in expected], sql
        called.update(name for name in kahuna.functions() if re.search(rf"\b{name}\(", sql))
    assert called == set(kahuna.functions()), f"not in any example: {set(kahuna.functions()) - called}"


def test_functions_are_datafusion_functions_for_the_dataframe_api():
    functions = kahuna.functions()
    assert len(functions) == 20
    assert isinstance(functions["jsd_sqrt"], datafusion.ScalarUDF)
    assert isinstance(functions["state_histogram"], datafusion.AggregateUDF)
    assert isinstance(functions["indict"], datafusion.WindowUDF)
    ctx = datafusion.SessionContext()
    df = ctx.from_pydict({"p": [[1.0, 0.0], [1.0, 1.0]], "q": [[0.0, 1.0], [1.0, 1.0]]})
    distances = df.select(functions["jsd_sqrt"](col("p"), col("q")).alias("d")).to_pydict()["d"]
    assert distances == [1.0, 0.0]
    histogram = (
        ctx.from_pydict({"ms": [5, 50, 500, 7]})
        .aggregate([], [functions["state_histogram"](col("ms"), lit(1), lit(1000), lit(3), lit("log")).alias("h")])
        .to_pydict()["h"]
    )
    assert histogram == [[2.0, 1.0, 1.0]]


def test_a_wrong_argument_type_raises_the_functions_own_message():
    ctx = datafusion.SessionContext()
    kahuna.register_all(ctx)
    with pytest.raises(Exception, match=r"jsd_sqrt: argument 1 \(p\)"):
        ctx.sql("SELECT jsd_sqrt('abc', [1, 2])").collect()
    with pytest.raises(Exception, match=r"state_histogram: argument 4 \(bins\) must be a positive integer literal"):
        ctx.sql("SELECT state_histogram(x, 1, 10, 0) FROM (VALUES (1)) AS v(x)").collect()
    # The interpreter is still there, and so is the session.
    assert ctx.sql("SELECT jsd_sqrt([1, 0], [1, 0]) AS d").to_pydict() == {"d": [0.0]}


@pytest.fixture(scope="module")
def demo_warehouse(tmp_path_factory) -> Path:
    warehouse = tmp_path_factory.mktemp("demo") / "warehouse"
    subprocess.run(
        [kahuna_bin(), "--warehouse", str(warehouse), "ingest", "logs", "sysstat", "jobhistory", "--cluster", "demo"],
        cwd=REPO / "data",
        check=True,
        capture_output=True,
    )
    return warehouse


# The README's queries (the commands table and the first look), and a function over a view.
README_QUERIES = [
    "SELECT host, state, count(*) FROM states GROUP BY host, state",
    "SELECT host, state, count(*) AS states, round(avg(duration_ms)) AS mean_ms FROM states "
    "GROUP BY host, state ORDER BY host, state",
    "SELECT host, cluster, state_histogram(duration_ms, 1, 60000, 20, 'log') AS hist FROM states "
    "WHERE cluster = 'demo' AND state = 'Map' GROUP BY host, cluster ORDER BY host",
]


@pytest.mark.parametrize("sql", README_QUERIES)
def test_connect_gives_the_rows_of_kahuna_sql(demo_warehouse, sql):
    out = subprocess.run(
        [kahuna_bin(), "--warehouse", str(demo_warehouse), "sql", "--format", "parquet", "-c", sql],
        check=True,
        capture_output=True,
    ).stdout
    expected = pq.read_table(io.BytesIO(out)).to_pylist()
    got = kahuna.connect(demo_warehouse).sql(sql).to_arrow_table().to_pylist()
    assert len(expected) >= 3
    if "ORDER BY" not in sql:
        expected, got = sorted(map(repr, expected)), sorted(map(repr, got))
    assert got == expected


def test_connect_lists_tables_and_views_and_converts_to_pandas_and_polars(demo_warehouse):
    warehouse = kahuna.Warehouse(str(demo_warehouse))
    assert {"states", "logs", "ingests", "sar_metrics"} <= set(warehouse.table_names())
    ctx = kahuna.connect(demo_warehouse)
    sql = "SELECT host, count(*) AS n FROM states GROUP BY host ORDER BY host"
    frame = ctx.sql(sql).to_pandas()
    assert list(frame.columns) == ["host", "n"] and len(frame) > 1
    assert ctx.sql(sql).to_polars().rows() == list(frame.itertuples(index=False, name=None))
    # The session's own tables live beside the warehouse's.
    ctx.sql("CREATE TABLE mine AS SELECT 1 AS one").collect()
    assert ctx.sql("SELECT one FROM mine").to_pydict() == {"one": [1]}
    with pytest.raises(Exception, match="already exists"):
        ctx.sql("CREATE TABLE states AS SELECT 1 AS one").collect()


def test_a_path_that_is_no_warehouse_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no warehouse at {tmp_path}/missing"):
        kahuna.connect(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is not a Kahuna warehouse: it holds no Delta table"):
        kahuna.connect(tmp_path / "empty")


def test_another_major_version_of_datafusion_is_refused_naming_both():
    script = "import datafusion; datafusion.__version__ = '54.1.0'; import kahuna"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError: kahuna was built against DataFusion 55" in result.stderr
    assert "datafusion is 54.1.0" in result.stderr


def test_the_m45_example_runs_the_study_over_a_warehouse(demo_warehouse):
    example = REPO / "python" / "examples" / "m45_correlation.py"
    out = subprocess.run([sys.executable, str(example), str(demo_warehouse)], check=True, capture_output=True, text=True)
    # The demo's job history has one job, its Maps on 3 hosts that are alike.
    rows = [line.split() for line in out.stdout.splitlines()]
    assert rows[0] == ["jobs", "hosts", "similar_hosts", "share_similar"]
    assert rows[2] == ["SUCCEEDED", "1", "3", "3", "1.0"]
