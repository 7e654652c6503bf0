//! A one-second sadc capture per node, written as `sadf -d` text (sysstat 12 columns, with
//! `-- -u -w -B -b -q -n DEV` as in the shared sample): the Ganesha sadc-vector and the columns
//! sadf prints beside it, derived from what the simulated tasks and the injected hogs use.
//!
//! `sadf -d` prints one activity after another, each under its `# hostname;interval;timestamp;…`
//! header; rows are produced second by second, so each row goes to a per-node spool tagged with
//! its activity, and the spool is read back activity by activity at the end. Memory stays flat.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::faults::{Fault, Injected};
use super::rng::{Rng, Stream};
use super::writers::{Clock, Out, file_name};

/// What tasks use, per second, accumulated from the scheduler's phases.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bin {
    /// Cores busy with task CPU phases.
    pub cpu: f32,
    pub disk_read_mb: f32,
    pub disk_write_mb: f32,
    pub rx_mb: f32,
    pub tx_mb: f32,
    /// Tasks running (JVMs alive).
    pub tasks: f32,
    /// Task JVMs started.
    pub launches: f32,
}

#[derive(Clone, Copy, Debug)]
pub enum Use {
    Cpu,
    DiskRead,
    DiskWrite,
    Rx,
    Tx,
    Tasks,
}

/// Per-second use of one node from the first second not yet written on.
#[derive(Default)]
pub struct Usage {
    base_s: i64,
    bins: VecDeque<Bin>,
}

impl Usage {
    fn bin(&mut self, second: i64) -> Option<&mut Bin> {
        let at = usize::try_from(second - self.base_s).ok()?;
        if at >= self.bins.len() {
            self.bins.resize(at + 1, Bin::default());
        }
        self.bins.get_mut(at)
    }

    /// `rate` per second of `what` over [from, to) (ms), split across the seconds it spans.
    pub fn add(&mut self, from_ms: i64, to_ms: i64, what: Use, rate: f64) {
        let mut t = from_ms.max(self.base_s * 1000);
        while t < to_ms {
            let second = t.div_euclid(1000);
            let until = ((second + 1) * 1000).min(to_ms);
            let amount = (rate * (until - t) as f64 / 1000.0) as f32;
            if let Some(bin) = self.bin(second) {
                match what {
                    Use::Cpu => bin.cpu += amount,
                    Use::DiskRead => bin.disk_read_mb += amount,
                    Use::DiskWrite => bin.disk_write_mb += amount,
                    Use::Rx => bin.rx_mb += amount,
                    Use::Tx => bin.tx_mb += amount,
                    Use::Tasks => bin.tasks += amount,
                }
            }
            t = until;
        }
    }

    /// A total spread evenly over [from, to).
    pub fn add_total(&mut self, from_ms: i64, to_ms: i64, what: Use, total: f64) {
        let secs = ((to_ms - from_ms) as f64 / 1000.0).max(0.001);
        self.add(from_ms, to_ms.max(from_ms + 1), what, total / secs);
    }

    pub fn launch(&mut self, at_ms: i64) {
        if let Some(bin) = self.bin(at_ms.div_euclid(1000)) {
            bin.launches += 1.0;
        }
    }

    /// The bins of the seconds before `second`, oldest first; they are gone from here after.
    fn take_before(&mut self, second: i64) -> Vec<(i64, Bin)> {
        let mut out = Vec::new();
        while self.base_s < second {
            out.push((self.base_s, self.bins.pop_front().unwrap_or_default()));
            self.base_s += 1;
        }
        out
    }
}

/// What a node runs beside Hadoop, as its capture shows it: bursts of the daemons every node has
/// (a log shipper, a backup agent, a JVM's collection) at random times of each node's own, and
/// cron's hourly jobs (`logrotate`, `updatedb`) on every node at once by its clock. The tasks
/// do not feel it: it is in the capture only, where a black-box diagnosis meets it.
struct Noise {
    rng: Rng,
    /// The current burst: until which second, its cores and its disk writes (MB/s).
    burst: (i64, f64, f64),
    next_burst: i64,
}

impl Noise {
    /// A burst every 10 minutes on average, of 5–30 s, 0.5–1.5 cores and 5–20 MB/s of writes.
    const MEAN_GAP_S: f64 = 600.0;
    /// Cron's hourly jobs: 30 s of a core and 20 MB/s of reads.
    const CRON_S: i64 = 30;

    fn new(seed: u64, node: usize) -> Noise {
        let mut rng = Rng::derive(seed, Stream::SadcNoise, &[node as u64]);
        let next_burst = rng.exp(Self::MEAN_GAP_S) as i64;
        Noise { rng, burst: (0, 0.0, 0.0), next_burst }
    }

    /// The cores, disk reads and disk writes (MB/s) beside Hadoop's in `second`, which the
    /// node's clock reads `clock_ms` into the hour.
    fn at(&mut self, second: i64, clock_ms: i64) -> (f64, f64, f64) {
        if second >= self.next_burst {
            let r = &mut self.rng;
            let length = r.range(5.0, 30.0) as i64;
            self.burst = (second + length, r.range(0.5, 1.5), r.range(5.0, 20.0));
            self.next_burst = second + length + r.exp(Self::MEAN_GAP_S) as i64;
        }
        let (until, cores, writes) = self.burst;
        let (cores, writes) = if second < until { (cores, writes) } else { (0.0, 0.0) };
        let cron = clock_ms.rem_euclid(3_600_000) < Self::CRON_S * 1000;
        if cron { (cores + 1.0, 20.0, writes) } else { (cores, 0.0, writes) }
    }
}

const HEADERS: [&str; 6] = [
    "# hostname;interval;timestamp;CPU;%user;%nice;%system;%iowait;%steal;%idle",
    "# hostname;interval;timestamp;proc/s;cswch/s",
    "# hostname;interval;timestamp;pgpgin/s;pgpgout/s;fault/s;majflt/s;pgfree/s;pgscank/s;pgscand/s;pgsteal/s;%vmeff",
    "# hostname;interval;timestamp;tps;rtps;wtps;dtps;bread/s;bwrtn/s;bdscd/s",
    "# hostname;interval;timestamp;runq-sz;plist-sz;ldavg-1;ldavg-5;ldavg-15;blocked",
    "# hostname;interval;timestamp;IFACE;rxpck/s;txpck/s;rxkB/s;txkB/s;rxcmp/s;txcmp/s;rxmcst/s;%ifutil",
];

/// The capture of one node.
pub struct SadcWriter {
    node: usize,
    host: String,
    cores: f64,
    disk_mb_s: f64,
    spool_path: PathBuf,
    spool: BufWriter<File>,
    path: PathBuf,
    gzip: bool,
    rng: Rng,
    clock: Clock,
    clock_offset_ms: i64,
    noise: Option<Noise>,
    interval_s: i64,
    load: [f64; 3],
    line: Vec<u8>,
}

impl SadcWriter {
    pub fn create(
        dir: &Path,
        node: usize,
        host: &str,
        cores: f64,
        disk_mb_s: f64,
        seed: u64,
        gzip: bool,
    ) -> io::Result<SadcWriter> {
        std::fs::create_dir_all(dir)?;
        let spool_path = dir.join(format!(".{host}.spool"));
        Ok(SadcWriter {
            node,
            host: host.to_string(),
            cores,
            disk_mb_s,
            spool: BufWriter::with_capacity(1 << 16, File::create(&spool_path)?),
            spool_path,
            path: dir.join(file_name(&format!("{host}.sadf-d.csv"), gzip)),
            gzip,
            rng: Rng::derive(seed, Stream::Sadc, &[node as u64]),
            clock: Clock::new(),
            clock_offset_ms: 0,
            noise: None,
            interval_s: 1,
            load: [0.3, 0.2, 0.1],
            line: Vec::with_capacity(256),
        })
    }

    /// The capture stamped by a clock `ms` off the true time.
    pub fn with_clock_offset(self, ms: i64) -> SadcWriter {
        SadcWriter { clock_offset_ms: ms, ..self }
    }

    /// A capture that records every `seconds` (by the node's clock), the figures of the second
    /// it records in; the seconds between are drawn all the same, so the records it keeps are
    /// those of a capture every second.
    pub fn with_interval(self, seconds: u32) -> SadcWriter {
        SadcWriter { interval_s: i64::from(seconds.max(1)), ..self }
    }

    /// The capture with what the node runs beside Hadoop ([`Noise`]), drawn from `seed`.
    pub fn with_noise(self, seed: u64) -> SadcWriter {
        let noise = Some(Noise::new(seed, self.node));
        SadcWriter { noise, ..self }
    }

    /// Writes the rows of every second before `second` (relative to the run's start).
    pub fn advance(
        &mut self,
        usage: &mut Usage,
        second: i64,
        epoch_ms: i64,
        fault: Option<&Injected>,
    ) -> io::Result<()> {
        for (s, bin) in usage.take_before(second) {
            self.row(s, &bin, epoch_ms, fault)?;
        }
        Ok(())
    }

    fn row(&mut self, second: i64, bin: &Bin, epoch_ms: i64, fault: Option<&Injected>) -> io::Result<()> {
        let t_ms = second * 1000;
        let clock_ms = epoch_ms + t_ms + self.clock_offset_ms;
        let (noise_cpu, noise_reads, noise_writes) = match &mut self.noise {
            Some(noise) => noise.at(second, clock_ms),
            None => (0.0, 0.0, 0.0),
        };
        let hog = |kind: Fault| fault.is_some_and(|f| f.fault == kind && f.at(self.node, t_ms));
        let r = &mut self.rng;
        let cores = self.cores;
        let hog_cpu = if hog(Fault::CpuHog) { Injected::cpu_hog_cores(cores) } else { 0.0 };
        let hog_disk = if hog(Fault::DiskHog) { Injected::disk_hog_mb_s(self.disk_mb_s) } else { 0.0 };
        // A killed attempt's use is taken back, which can leave a rounding error below zero.
        let get = |x: f32| f64::from(x.max(0.0));
        let disk_w = get(bin.disk_write_mb) + hog_disk + noise_writes;
        let disk_r = get(bin.disk_read_mb) + noise_reads;
        let (rx, tx) = (get(bin.rx_mb), get(bin.tx_mb));
        let tasks = get(bin.tasks);
        let demand = get(bin.cpu) + hog_cpu + noise_cpu + 0.05;
        let busy = demand.min(cores);
        let disk_util = ((disk_r + disk_w) / self.disk_mb_s).min(1.0);
        let user = (100.0 * busy * 0.9 / cores * r.jitter(0.03)).clamp(0.0, 100.0);
        let system = (100.0 * (busy * 0.08 + (disk_r + disk_w + rx + tx) * 0.004) / cores * r.jitter(0.05) + 0.3)
            .min(100.0 - user);
        let iowait =
            (100.0 * disk_util * (cores - busy).max(0.0) / cores * 0.5 * r.jitter(0.05)).min(100.0 - user - system);
        let idle = (100.0 - user - system - iowait).max(0.0);
        let blocked = (disk_util * tasks).round();
        let running = demand + blocked;
        for (l, minutes) in self.load.iter_mut().zip([1.0f64, 5.0, 15.0]) {
            let decay = (-1.0 / (60.0 * minutes)).exp();
            *l = *l * decay + running * (1.0 - decay);
        }
        let launches = get(bin.launches);
        let io_kb = (disk_r + disk_w) * 1024.0;
        let rows: [(u8, String); 6] = [
            (0, format!("-1;{user:.2};0.00;{system:.2};{iowait:.2};0.00;{idle:.2}")),
            (
                1,
                format!(
                    "{:.2};{:.2}",
                    launches * 6.0 + r.below(2) as f64,
                    (350.0 + 900.0 * tasks + 25.0 * (io_kb / 1024.0 + rx + tx)) * r.jitter(0.05)
                ),
            ),
            (2, {
                let faults = (150.0 + 2500.0 * launches + 300.0 * tasks) * r.jitter(0.08);
                format!(
                    "{:.2};{:.2};{faults:.2};{:.2};{:.2};0.00;0.00;0.00;0.00",
                    disk_r * 1024.0,
                    disk_w * 1024.0,
                    launches * 0.5,
                    (disk_r * 1024.0 + 120.0 + 900.0 * launches) * r.jitter(0.05)
                )
            }),
            (3, {
                let (rtps, wtps) = (disk_r * 8.0, disk_w * 8.0 + 0.5);
                format!(
                    "{:.2};{rtps:.2};{wtps:.2};0.00;{:.2};{:.2};0.00",
                    rtps + wtps,
                    disk_r * 2048.0,
                    disk_w * 2048.0
                )
            }),
            (
                4,
                format!(
                    "{};{};{:.2};{:.2};{:.2};{blocked}",
                    (demand - cores).max(0.0).round() as u64 + r.below(2),
                    (160.0 + 45.0 * tasks).round(),
                    self.load[0],
                    self.load[1],
                    self.load[2]
                ),
            ),
            (5, {
                let (rx_kb, tx_kb) = (rx * 1024.0, tx * 1024.0);
                let (rx_pck, tx_pck) = (rx_kb / 1.45 + tx_kb / 30.0 + 4.0, tx_kb / 1.45 + rx_kb / 30.0 + 4.0);
                let util = rx_kb.max(tx_kb) * 8.0 / 10_000.0;
                format!("eth0;{rx_pck:.2};{tx_pck:.2};{rx_kb:.2};{tx_kb:.2};0.00;0.00;0.00;{:.2}", util.min(100.0))
            }),
        ];
        if clock_ms.div_euclid(1000) % self.interval_s != 0 {
            return Ok(());
        }
        let stamp = String::from_utf8_lossy(self.clock.seconds_text(clock_ms.div_euclid(1000))).into_owned();
        for (activity, fields) in rows {
            if activity == 5 {
                self.spool_row(activity, &stamp, "lo;0.00;0.00;0.00;0.00;0.00;0.00;0.00;0.00")?;
            }
            self.spool_row(activity, &stamp, &fields)?;
        }
        Ok(())
    }

    fn spool_row(&mut self, activity: u8, stamp: &str, fields: &str) -> io::Result<()> {
        self.line.clear();
        self.line.push(b'0' + activity);
        let _ = writeln!(self.line, "{};{};{stamp} UTC;{fields}", self.host, self.interval_s);
        self.spool.write_all(&self.line)
    }

    /// Writes the capture, activity by activity, and drops the spool.
    pub fn finish(mut self, usage: &mut Usage, end_s: i64, epoch_ms: i64, fault: Option<&Injected>) -> io::Result<u64> {
        self.advance(usage, end_s, epoch_ms, fault)?;
        self.spool.flush()?;
        drop(self.spool);
        let mut out = Out::create(&self.path, self.gzip)?;
        let mut rows = 0;
        for (activity, header) in HEADERS.iter().enumerate() {
            writeln!(out, "{header}")?;
            let tag = b'0' + activity as u8;
            for line in BufReader::new(File::open(&self.spool_path)?).lines() {
                let line = line?;
                if line.as_bytes().first() == Some(&tag) {
                    out.write_all(&line.as_bytes()[1..])?;
                    out.write_all(b"\n")?;
                    rows += 1;
                }
            }
        }
        out.finish()?;
        std::fs::remove_file(&self.spool_path)?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_spreads_over_seconds() {
        let mut u = Usage::default();
        u.add(500, 2500, Use::DiskRead, 10.0);
        u.launch(1200);
        let bins = u.take_before(3);
        let read: Vec<f32> = bins.iter().map(|(_, b)| b.disk_read_mb).collect();
        assert_eq!(read, vec![5.0, 10.0, 5.0]);
        assert_eq!(bins[1].1.launches, 1.0);
        // Seconds already written take nothing more.
        u.add(0, 4000, Use::Tasks, 1.0);
        assert_eq!(u.take_before(4).iter().map(|(s, b)| (*s, b.tasks)).collect::<Vec<_>>(), vec![(3, 1.0)]);
    }

    #[test]
    fn capture_is_sadf_d_text() {
        let dir = tempfile::tempdir().unwrap();
        let w = SadcWriter::create(dir.path(), 0, "r01n01", 4.0, 60.0, 1, false).unwrap();
        let mut u = Usage::default();
        u.add(0, 2000, Use::Cpu, 2.0);
        let hog = Injected::new(Fault::CpuHog, 0, 1000, 10_000, 60.0);
        let rows = w.finish(&mut u, 2, 1_219_622_400_000, Some(&hog)).unwrap();
        assert_eq!(rows, 14);
        let text = std::fs::read_to_string(dir.path().join("r01n01.sadf-d.csv")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADERS[0]);
        assert!(lines[1].starts_with("r01n01;1;2008-08-25 00:00:00 UTC;-1;"), "{}", lines[1]);
        let user = |l: &str| l.split(';').nth(4).unwrap().parse::<f64>().unwrap();
        // Two cores of four busy, then the hog's 2.8 cores on top.
        assert!((user(lines[1]) - 46.1).abs() < 5.0 && user(lines[2]) > 80.0, "{text}");
        assert_eq!(lines.iter().filter(|l| l.starts_with('#')).count(), 6);
        assert_eq!(lines.iter().filter(|l| l.contains(";eth0;")).count(), 2);
        assert!(!dir.path().join(".r01n01.spool").exists());
    }
}
