//! Scratch: what writing sar_metrics rows costs, per phase (CPU time). Not committed.
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array};
use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::basic::{Compression, ZstdLevel};
use deltalake::parquet::file::properties::{EnabledStatistics, WriterProperties};
use deltalake::parquet::schema::types::ColumnPath;
use kahuna::warehouse::tables::{Rows, Table};

fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

fn series() -> Vec<(String, Option<String>, String)> {
    let mut s = Vec::new();
    for m in ["%user", "%nice", "%system", "%iowait", "%steal", "%idle"] { s.push(("cpu-load".into(), Some("all".into()), m.into())); }
    for m in ["proc/s", "cswch/s"] { s.push(("process-and-context-switch".into(), None, m.into())); }
    for m in ["pgpgin/s","pgpgout/s","fault/s","majflt/s","pgfree/s","pgscank/s","pgscand/s","pgsteal/s","%vmeff"] { s.push(("paging".into(), None, m.into())); }
    for m in ["tps","rtps","wtps","dtps","bread/s","bwrtn/s","bdscd/s"] { s.push(("io".into(), None, m.into())); }
    for m in ["runq-sz","plist-sz","ldavg-1","ldavg-5","ldavg-15","blocked"] { s.push(("queue".into(), None, m.into())); }
    for d in ["lo", "eth0"] { for m in ["rxpck/s","txpck/s","rxkB/s","txkB/s","rxcmp/s","txcmp/s","rxmcst/s","%ifutil"] { s.push(("net-dev".into(), Some(d.into()), m.into())); } }
    s
}

fn value(i: usize) -> f64 { ((i * 7919 + 104_729) % 100_000) as f64 / 100.0 }

const BATCH: usize = 32 * 1024;

fn props(dict: bool, stats: bool) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
        .set_max_row_group_row_count(Some(128 * 1024))
        .set_column_dictionary_enabled(ColumnPath::from("value"), false);
    if !dict { for c in ["host", "activity", "device", "metric", "ts"] { b = b.set_column_dictionary_enabled(ColumnPath::from(c), false); } }
    if !stats { for c in ["host", "activity", "device", "metric"] { b = b.set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::None); } }
    b.build()
}

fn coded(n: usize, sorted: bool) -> Vec<RecordBatch> {
    let s = series();
    let mut names: Vec<String> = vec!["node0".into()];
    let code = |x: &str, names: &mut Vec<String>| -> u32 { match names.iter().position(|n| n == x) { Some(i) => i as u32, None => { names.push(x.into()); names.len() as u32 - 1 } } };
    let sc: Vec<(u32, Option<u32>, u32)> = s.iter().map(|(a, d, m)| (code(a, &mut names), d.as_ref().map(|d| code(d, &mut names)), code(m, &mut names))).collect();
    let dict = StringArray::from(names.clone());
    let schema = Table::SarMetrics.data_schema();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let end = (start + BATCH).min(n);
        let mut idx: Vec<usize> = (start..end).collect();
        if sorted { idx.sort_by_key(|i| (i % 46, i / 46)); }
        let host = UInt32Array::from(vec![0u32; end - start]);
        let act = UInt32Array::from_iter_values(idx.iter().map(|i| sc[i % 46].0));
        let dev = UInt32Array::from_iter(idx.iter().map(|i| sc[i % 46].1));
        let met = UInt32Array::from_iter_values(idx.iter().map(|i| sc[i % 46].2));
        let ts = TimestampMicrosecondArray::from_iter_values(idx.iter().map(|i| (1_219_449_600 + (i / 46) as i64) * 1_000_000)).with_timezone("UTC");
        let val = Float64Array::from_iter_values(idx.iter().map(|i| value(*i)));
        let take = |c: &UInt32Array| datafusion::arrow::compute::take(&dict, c, None).unwrap();
        let cols: Vec<ArrayRef> = vec![take(&host), Arc::new(ts), take(&act), take(&dev), take(&met), Arc::new(val)];
        out.push(RecordBatch::try_new(schema.clone(), cols).unwrap());
        start = end;
    }
    out
}

fn main() {
    let n = 4_000_000;
    let s = series();
    let t = cpu();
    let mut rows = Rows::new(Table::SarMetrics, 14000);
    let mut batches = Vec::new();
    for i in 0..n {
        let (a, d, m) = &s[i % 46];
        rows.row().text(Some("node0")).ms(Some(1_219_449_600_000 + (i / 46) as i64 * 1000)).text(Some(a)).text(d.as_deref()).text(Some(m)).float(Some(value(i)));
        if rows.len() >= BATCH { batches.push(rows.finish().unwrap()); }
    }
    batches.push(rows.finish().unwrap());
    println!("rows api build+finish: {:.1} ns/row", (cpu() - t) / n as f64 * 1e9);
    let t = cpu();
    let coded_batches = coded(n, false);
    println!("coded+take build: {:.1} ns/row", (cpu() - t) / n as f64 * 1e9);
    assert_eq!(coded_batches.iter().map(|b| b.num_rows()).sum::<usize>(), n);
    let sorted = coded(n, true);
    for (name, bs) in [("time order", &coded_batches), ("series order", &sorted)] {
        for (dict, stats) in [(true, true), (false, true), (true, false), (false, false)] {
            let t = cpu();
            let mut w = ArrowWriter::try_new(Vec::<u8>::new(), bs[0].schema(), Some(props(dict, stats))).unwrap();
            for b in bs { w.write(b).unwrap(); }
            let bytes = w.into_inner().unwrap();
            println!("{name} dict={dict} stats={stats}: {:.1} ns/row, {:.3} bytes/row", (cpu() - t) / n as f64 * 1e9, bytes.len() as f64 / n as f64);
        }
    }
    for (name, bs) in [("time", &coded_batches), ("series", &sorted)] {
      for dict in [true, false] {
        let t = cpu();
        let mut w = ArrowWriter::try_new(std::fs::File::create(format!("/tmp/sar-{name}-{dict}.parquet")).unwrap(), bs[0].schema(), Some(props(dict, true))).unwrap();
        for b in bs { w.write(b).unwrap(); }
        w.close().unwrap();
        let _ = t;
      }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for f in ["time-true", "time-false", "series-true", "series-false"] {
            let ctx = datafusion::prelude::SessionContext::new();
            ctx.register_parquet("s", &format!("/tmp/sar-{f}.parquet"), Default::default()).await.unwrap();
            for q in ["SELECT metric, avg(value) FROM s GROUP BY metric", "SELECT count(*), avg(value) FROM s WHERE metric = '%user' AND device = 'all'", "SELECT activity, device, metric, max(value) FROM s GROUP BY 1, 2, 3"] {
                let t = std::time::Instant::now();
                for _ in 0..3 { ctx.sql(q).await.unwrap().collect().await.unwrap(); }
                println!("{f}: {:.0} ms  {q}", t.elapsed().as_secs_f64() * 1000.0 / 3.0);
            }
        }
    });
    for dict in [true, false] {
        for col in 0..6 {
            let t = cpu();
            let schema = Arc::new(coded_batches[0].schema().project(&[col]).unwrap());
            let mut w = ArrowWriter::try_new(Vec::<u8>::new(), schema.clone(), Some(props(dict, true))).unwrap();
            for b in &coded_batches { w.write(&RecordBatch::try_new(schema.clone(), vec![b.column(col).clone()]).unwrap()).unwrap(); }
            let bytes = w.into_inner().unwrap();
            println!("  dict={dict} column {}: {:.1} ns/row, {:.3} bytes/row", schema.field(0).name(), (cpu() - t) / n as f64 * 1e9, bytes.len() as f64 / n as f64);
            let t = cpu();
            let mut w = ArrowWriter::try_new(Vec::<u8>::new(), schema.clone(), Some(props(dict, true))).unwrap();
            for b in &sorted { w.write(&RecordBatch::try_new(schema.clone(), vec![b.column(col).clone()]).unwrap()).unwrap(); }
            let bytes = w.into_inner().unwrap();
            println!("  series dict={dict} column {}: {:.1} ns/row, {:.3} bytes/row", schema.field(0).name(), (cpu() - t) / n as f64 * 1e9, bytes.len() as f64 / n as f64);
        }
    }
}
