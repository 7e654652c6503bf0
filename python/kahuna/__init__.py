"""Kahuna's peer-comparison SQL functions and Hadoop history warehouses, for DataFusion.

    import kahuna
    ctx = kahuna.connect("warehouse")   # a datafusion.SessionContext
    ctx.sql("SELECT host, count(*) FROM states GROUP BY host").to_pandas()

Any other ``datafusion.SessionContext`` gets the functions with ``kahuna.register_all(ctx)``.
"""

from __future__ import annotations

import os

import datafusion

from . import _kahuna

__all__ = ["Warehouse", "connect", "functions", "register_all"]


def _check_datafusion() -> None:
    # Scalar, aggregate and window functions cross the FFI without a version of their own: a
    # DataFusion of another major version would misread them rather than refuse them.
    built_for = _kahuna.datafusion_major()
    installed = datafusion.__version__
    if installed.split(".")[0] != str(built_for):
        raise ImportError(
            f"kahuna was built against DataFusion {built_for}, but the installed Python package "
            f"datafusion is {installed}: pip install 'datafusion>={built_for},<{built_for + 1}'"
        )


_check_datafusion()

Warehouse = _kahuna.Warehouse


def functions() -> dict[str, datafusion.ScalarUDF | datafusion.AggregateUDF | datafusion.WindowUDF]:
    """Every function of kahuna-udfs by name, as DataFusion functions.

    Each can be registered (``ctx.register_udf``, ``register_udaf``, ``register_udwf``) or
    called on columns for the DataFrame API: ``functions()["jsd_sqrt"](col("p"), col("q"))``.
    """
    wrap = {
        _kahuna.ScalarFunction: datafusion.udf,
        _kahuna.AggregateFunction: datafusion.udaf,
        _kahuna.WindowFunction: datafusion.udwf,
    }
    return {f.name: wrap[type(f)](f) for f in _kahuna.functions()}


def register_all(ctx: datafusion.SessionContext) -> None:
    """Registers every function of kahuna-udfs with ``ctx``."""
    for function in functions().values():
        if isinstance(function, datafusion.ScalarUDF):
            ctx.register_udf(function)
        elif isinstance(function, datafusion.AggregateUDF):
            ctx.register_udaf(function)
        else:
            ctx.register_udwf(function)


def connect(
    warehouse: str | os.PathLike[str], config: datafusion.SessionConfig | None = None
) -> datafusion.SessionContext:
    """A session over a Kahuna warehouse, as ``kahuna sql`` has it.

    Its tables and views are read as of the last finished ingest run, in the default schema;
    the functions are registered; SQL is parsed in PostgreSQL's dialect (every table has a
    ``cluster`` column, which the generic dialect would read as ``CLUSTER BY``). Tables that the
    session creates live in memory. Pass ``config`` to set other options.

    Raises ``FileNotFoundError`` where there is no folder, ``ValueError`` where the folder holds
    no Delta table.
    """
    opened = Warehouse(os.fspath(warehouse))
    config = (config or datafusion.SessionConfig()).with_information_schema(True)
    config = config.set("datafusion.sql_parser.dialect", "PostgreSQL")
    ctx = datafusion.SessionContext(config)
    register_all(ctx)
    ctx.catalog().register_schema("public", opened)
    return ctx
