"""DuckDB's text-to-Parquet pipeline over Hadoop daemon logs, the peer of `kahuna ingest` in
`cargo bench --bench text_to_parquet`: every line of every file read, its log4j fields split
with a regular expression, its time parsed (NULL where a line has none: a stack trace's), and
the lines written as zstd Parquet partitioned by date, as Kahuna's `logs` table is. No states:
Kahuna's run builds them as well.

usage: python duckdb_text_to_parquet.py INPUT_DIR OUTPUT_DIR THREADS
"""

import sys

import duckdb

input_dir, output_dir, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = duckdb.connect()
db.execute(f"SET threads = {threads}")
db.execute(
    f"""
    COPY (
        SELECT
            filename AS file,
            fields.stamp AS stamp_text,
            try_strptime(fields.stamp, '%Y-%m-%d %H:%M:%S,%g') AS ts,
            fields.level AS level,
            fields.logger AS logger,
            fields.message AS message,
            CAST(try_strptime(fields.stamp, '%Y-%m-%d %H:%M:%S,%g') AS DATE) AS date
        FROM (
            SELECT
                filename,
                regexp_extract(
                    line,
                    '^(\\d{{4}}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d,\\d{{3}}) (\\w+) ([^:]+): (.*)$',
                    ['stamp', 'level', 'logger', 'message']
                ) AS fields
            FROM read_csv(
                '{input_dir}/**/*.log',
                columns = {{'line': 'VARCHAR'}},
                delim = '\x1f', quote = '', escape = '', header = false,
                auto_detect = false, strict_mode = false, filename = true
            )
        )
    ) TO '{output_dir}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (date))
    """
)
