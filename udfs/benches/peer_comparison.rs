//! Benchmarks of the speed targets, as a plain binary that prints figures (medians of
//! several runs). Run on one core with
//! `cargo bench -p kahuna-udfs --bench peer_comparison` (release build); pass a name
//! (`jsd`, `histogram`, `indict`, `gmm`) to run one.
//!
//! Without `--bench` (which `cargo bench` passes), e.g. under `cargo test --all-targets`, every
//! size is divided by 1000 so the run is a quick smoke test.
//!
//! Times are this thread's CPU time, so that the other processes of a shared machine do not
//! count against a per-core figure (everything here runs on the one thread).
//!
//! Targets: jsd_sqrt of 32-bin pairs ≤ 50 ns; state_histogram over 20 M rows in 1 M groups
//! ≥ 50 M rows/s; indict over a 100-node partition computes each pair at most once; gmm_fit K = 7 on
//! 1 M × 14 under 30 s.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array, RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt32Type};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::EmitTo;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::physical_expr::expressions::{col, lit};
use datafusion::prelude::{SessionConfig, SessionContext};
use kahuna_udfs::kernels;

/// SplitMix64, so the benchmark needs no random-number crate.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (1.0 - self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Time this thread has spent on a CPU: other processes on a shared machine do not count
/// against it, as they would against wall time.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux defines.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = thread_cpu_time();
                std::hint::black_box(f());
                thread_cpu_time() - start
            })
            .collect(),
    )
}

fn histograms(rng: &mut Rng, count: usize, bins: usize) -> Vec<Vec<f64>> {
    (0..count).map(|_| (0..bins).map(|_| (rng.unit() * 20.0).floor()).collect()).collect()
}

fn bench_jsd(scale: usize) {
    let mut rng = Rng(1);
    let raw = histograms(&mut rng, if scale == 1 { 1000 } else { 50 }, 32);
    let normalised: Vec<(Vec<f64>, f64)> = raw
        .iter()
        .map(|h| {
            let mut p = Vec::new();
            let plogp = kernels::normalise(h, &mut p).expect("random histograms are distributions");
            (p, plogp)
        })
        .collect();
    let pairs = raw.len() * (raw.len() - 1) / 2;
    let all_pairs = || {
        let mut total = 0.0;
        for (i, (p, hp)) in normalised.iter().enumerate() {
            for (q, hq) in &normalised[i + 1..] {
                total += kernels::jsd_sqrt_normalised(p, *hp, q, *hq);
            }
        }
        total
    };
    let t = time(7, all_pairs);
    println!("jsd_sqrt, 32 bins, normalised once per histogram: {:.1} ns/pair", t.as_nanos() as f64 / pairs as f64);
    let t = time(3, || raw.windows(2).take(1000).map(|w| kernels::jsd_sqrt_raw(&w[0], &w[1])).sum::<Option<f64>>());
    println!(
        "jsd_sqrt_raw, 32 bins, normalising both sides: {:.1} ns/pair",
        t.as_nanos() as f64 / (raw.len() - 1) as f64
    );
}

fn bench_histogram(scale: usize) {
    let rows = 20_000_000 / scale;
    let groups = 1_000_000 / scale;
    const BATCH: usize = 8192;
    let mut rng = Rng(2);
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::UInt32, false),
        Field::new("v", DataType::Float64, false),
    ]));
    let batches: Vec<RecordBatch> = (0..rows.div_ceil(BATCH))
        .map(|i| {
            let len = BATCH.min(rows - i * BATCH);
            let g: UInt32Array = (0..len).map(|_| (rng.next_u64() % groups as u64) as u32).collect();
            let v: Float64Array = (0..len).map(|_| rng.unit() * 1200.0).collect();
            RecordBatch::try_new(schema.clone(), vec![Arc::new(g), Arc::new(v)]).expect("valid batch")
        })
        .collect();

    // The groups accumulator alone, as DataFusion's hash aggregation drives it.
    let udaf =
        kahuna_udfs::aggregate_functions().into_iter().find(|f| f.name() == "state_histogram").expect("registered");
    let exprs = [col("v", &schema).expect("column v"), lit(0.0), lit(1000.0), lit(20i64)];
    let expr_fields: Vec<_> = [DataType::Float64, DataType::Float64, DataType::Float64, DataType::Int64]
        .into_iter()
        .map(|t| Arc::new(Field::new("x", t, true)))
        .collect();
    let return_field = Arc::new(Field::new("h", udaf.return_type(&[]).expect("return type"), true));
    let args = || AccumulatorArgs {
        return_field: return_field.clone(),
        schema: &schema,
        ignore_nulls: false,
        order_bys: &[],
        is_reversed: false,
        name: "state_histogram",
        is_distinct: false,
        exprs: &exprs,
        expr_fields: &expr_fields,
    };
    let group_indices: Vec<Vec<usize>> = batches
        .iter()
        .map(|b| b.column(0).as_primitive::<UInt32Type>().values().iter().map(|&g| g as usize).collect())
        .collect();
    let t = time(5, || {
        let mut acc = udaf.create_groups_accumulator(args()).expect("groups accumulator");
        for (batch, indices) in batches.iter().zip(&group_indices) {
            let values: ArrayRef = batch.column(1).clone();
            acc.update_batch(&[values], indices, None, groups).expect("update");
        }
        acc.evaluate(EmitTo::All).expect("evaluate").len()
    });
    println!(
        "state_histogram groups accumulator, {rows} rows in {groups} groups × 20 bins: {:.0} M rows/s",
        rows as f64 / t.as_secs_f64() / 1e6
    );

    // The whole query on one partition, hashing included.
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let t = runtime.block_on(async {
        let mut ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
        kahuna_udfs::register_all(&mut ctx).expect("register");
        let table = MemTable::try_new(schema.clone(), vec![batches.clone()]).expect("table");
        ctx.register_table("t", Arc::new(table)).expect("register");
        let mut runs = Vec::new();
        for _ in 0..3 {
            let start = thread_cpu_time();
            let df = ctx.sql("SELECT g, state_histogram(v, 0, 1000, 20) FROM t GROUP BY g").await.expect("plan");
            std::hint::black_box(df.collect().await.expect("run"));
            runs.push(thread_cpu_time() - start);
        }
        median(runs)
    });
    println!(
        "SELECT g, state_histogram(...) GROUP BY g, 1 partition, {rows} rows, {groups} groups: {:.1} M rows/s ({:.2} s)",
        rows as f64 / t.as_secs_f64() / 1e6,
        t.as_secs_f64()
    );
}

/// `values` as a list array of histograms of `bins` bins each.
fn histogram_list(values: Vec<f64>, bins: usize) -> ArrayRef {
    let count = values.len() / bins;
    Arc::new(datafusion::arrow::array::ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        datafusion::arrow::buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(bins, count)),
        Arc::new(Float64Array::from(values)),
        None,
    ))
}

fn bench_indict() {
    let mut rng = Rng(3);
    let list = histogram_list(histograms(&mut rng, 100, 32).concat(), 32);
    let t = time(51, || kernels::count_far_peers("indict", &list, 0.3).expect("counts"));
    println!(
        "indict over one 100-node partition of 32-bin histograms (4950 pairs): {:.1} µs",
        t.as_nanos() as f64 / 1e3
    );
    // A peer group as SALSA sees one: 400 nodes whose 12-bin duration histograms share a shape
    // (counts of a few dozen), one slow node among them.
    let nodes = 400;
    let values: Vec<f64> = (0..nodes)
        .flat_map(|node| {
            let peak = if node == 7 { 9.0 } else { 4.0 };
            (0..12).map(move |bin: usize| 40.0 * (-(bin as f64 - peak).powi(2) / 4.0).exp()).collect::<Vec<_>>()
        })
        .map(|x| (x + rng.unit() * 4.0).floor())
        .collect();
    let list = histogram_list(values.clone(), 12);
    let t = time(21, || kernels::count_far_peers("indict", &list, 0.5).expect("counts"));
    println!(
        "indict over one 400-node peer group of similar 12-bin histograms, one odd (79800 pairs): {:.1} µs",
        t.as_nanos() as f64 / 1e3
    );
    // What SALSA meets most on a simulated M45 day: 31 K (state, tick) groups of 17 hosts on
    // average, two thirds of them under 32. Here the 400 nodes above as 25 groups of 16.
    let groups: Vec<ArrayRef> = values.chunks(16 * 12).map(|group| histogram_list(group.to_vec(), 12)).collect();
    let t = time(21, || {
        for list in &groups {
            kernels::count_far_peers("indict", list, 0.5).expect("counts");
        }
    });
    println!("indict over 25 peer groups of 16 such histograms (3000 pairs): {:.1} µs", t.as_nanos() as f64 / 1e3);
}

fn bench_gmm(scale: usize) {
    let rows = 1_000_000 / scale;
    const DIMS: usize = 14;
    const K: usize = 7;
    let mut rng = Rng(4);
    let centres: Vec<Vec<f64>> = (0..K).map(|_| (0..DIMS).map(|_| rng.unit() * 100.0).collect()).collect();
    let points: Vec<f64> = (0..rows).flat_map(|i| centres[i % K].clone()).map(|c| c + 3.0 * rng.normal()).collect();
    let t = time(3, || kernels::fit(&points, DIMS, K, 42));
    println!("gmm_fit K = 7 on {rows} × 14 (diagonal covariances): {:.2} s", t.as_secs_f64());
}

fn main() {
    let scale = if std::env::args().any(|a| a == "--bench") { 1 } else { 1000 };
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    println!("times are the thread's CPU time, medians of several runs");
    if run("jsd") {
        bench_jsd(scale);
    }
    if run("histogram") {
        bench_histogram(scale);
    }
    if run("indict") {
        bench_indict();
    }
    if run("gmm") {
        bench_gmm(scale);
    }
}
