"""A Flight SQL client of `kahuna serve`, through ADBC (adbc-driver-flightsql from PyPI), for
tests/serve.rs and the serving benchmark.

    client.py run URI REQUESTS.json OUT_DIR [--tls-root-certs PEM]    each request, in order
    client.py load URI SQL --clients N --queries M [--ready-after K]

The token is read from KAHUNA_SERVE_TOKEN (a request may give its own). A request is
{"sql", "params", "token"}, or {"table_schema": NAME} or {"tables": true} (ADBC's catalog
calls). `run` writes each result as OUT_DIR/<index>.arrow, or the error as OUT_DIR/<index>.error. `load` prints "ready"
once K queries are answered, then one JSON line: answers seen (each with its count), errors,
queries per second and latency percentiles.
"""

import argparse
import json
import os
import sys
import threading
import time

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
from adbc_driver_flightsql import DatabaseOptions


def connect(uri, token, root_certs=None):
    kwargs = {}
    if root_certs is not None:
        with open(root_certs) as f:
            kwargs[DatabaseOptions.TLS_ROOT_CERTS.value] = f.read()
    if token is not None:
        kwargs[DatabaseOptions.AUTHORIZATION_HEADER.value] = f"Bearer {token}"
    return flight_sql.connect(uri, db_kwargs=kwargs, autocommit=True)


def run(args):
    with open(args.requests) as f:
        requests = json.load(f)
    default_token = os.environ.get("KAHUNA_SERVE_TOKEN")
    for index, request in enumerate(requests):
        token = request.get("token", default_token)
        base = os.path.join(args.out, str(index))
        try:
            with connect(args.uri, token, args.tls_root_certs) as conn, conn.cursor() as cur:
                if "table_schema" in request:
                    schema = conn.adbc_get_table_schema(request["table_schema"])
                    answer(base, pa.table({"column": schema.names, "type": [str(t) for t in schema.types]}))
                    continue
                if "tables" in request:
                    objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
                    names = [(c["catalog_name"], s["db_schema_name"], t["table_name"])
                             for c in objects for s in c["catalog_db_schemas"] for t in s["db_schema_tables"]]
                    answer(base, pa.table({name: list(column) for name, column in zip(("catalog", "schema", "table"), zip(*names))}))
                    continue
                params = request.get("params")
                if isinstance(params, dict):
                    # Bound by name, as a query file's @params are.
                    params = pa.record_batch({name: [value] for name, value in params.items()})
                cur.execute(request["sql"], params)
                answer(base, cur.fetch_arrow_table())
        except Exception as error:  # the test reads what the server said
            with open(base + ".error", "w") as f:
                f.write(str(error))


def answer(base, table):
    with pa.OSFile(base + ".arrow", "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def load(args):
    token = os.environ.get("KAHUNA_SERVE_TOKEN")
    connections = [connect(args.uri, token) for _ in range(args.clients)]
    lock = threading.Lock()
    remaining = [args.queries]
    answers, errors, latencies = {}, [], []
    ready = threading.Event()

    def client(conn):
        cur = conn.cursor()
        while True:
            with lock:
                if remaining[0] == 0:
                    return
                remaining[0] -= 1
            start = time.perf_counter()
            try:
                cur.execute(args.sql)
                rows = json.dumps(cur.fetch_arrow_table().to_pylist(), default=str)
            except Exception as error:
                with lock:
                    errors.append(str(error))
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                answers[rows] = answers.get(rows, 0) + 1
                if len(latencies) >= args.ready_after and not ready.is_set():
                    print("ready", flush=True)
                    ready.set()

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(conn,)) for conn in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    for conn in connections:
        conn.close()
    latencies.sort()

    def percentile(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else None

    print(json.dumps({
        "answers": answers,
        "errors": errors,
        "queries": len(latencies) + len(errors),
        "seconds": wall,
        "qps": len(latencies) / wall,
        "p50_ms": percentile(0.50),
        "p99_ms": percentile(0.99),
    }), flush=True)


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("uri")
    run_parser.add_argument("requests")
    run_parser.add_argument("out")
    run_parser.add_argument("--tls-root-certs")
    load_parser = commands.add_parser("load")
    load_parser.add_argument("uri")
    load_parser.add_argument("sql")
    load_parser.add_argument("--clients", type=int, default=20)
    load_parser.add_argument("--queries", type=int, default=1000)
    load_parser.add_argument("--ready-after", type=int, default=0)
    args = parser.parse_args()
    {"run": run, "load": load}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
