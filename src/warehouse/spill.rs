//! Rows a [`PartWriter`](super::PartWriter) has no open file for, kept in one temporary Arrow
//! IPC file (LZ4, as DataFusion spills) until the writer finishes: each date is then written at
//! once, from the spills of every writer of the table, so a run through months of rotated logs
//! leaves one file per date instead of a small file each time its input moves to another day.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};

use anyhow::{Context, Result};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::BatchCoalescer;
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::ipc::reader::FileReader;
use datafusion::arrow::ipc::writer::{FileWriter, IpcWriteOptions};

/// Rows of one date are copied together up to this many before they go to disk: a stream's
/// lines come date after date, each batch of them small.
const SPILLED_BATCH_ROWS: usize = 8 * 1024;

#[derive(Default)]
pub struct Spill {
    writer: Option<(FileWriter<BufWriter<File>>, tempfile::TempPath)>,
    /// The date of each batch written, in order.
    dates: Vec<i32>,
    /// The rows of the date spilled last, not yet written.
    pending: Option<(i32, BatchCoalescer)>,
}

impl Spill {
    pub fn push(&mut self, batch: RecordBatch, date: i32) -> Result<()> {
        if self.pending.as_ref().is_some_and(|(pending, _)| *pending != date) {
            self.write_pending()?;
        }
        let (_, rows) =
            self.pending.get_or_insert_with(|| (date, BatchCoalescer::new(batch.schema(), SPILLED_BATCH_ROWS)));
        rows.push_batch(batch)?;
        while let Some(full) = rows.next_completed_batch() {
            Self::write(&mut self.writer, &mut self.dates, full, date)?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> Result<()> {
        let Some((date, mut rows)) = self.pending.take() else { return Ok(()) };
        rows.finish_buffered_batch()?;
        while let Some(batch) = rows.next_completed_batch() {
            Self::write(&mut self.writer, &mut self.dates, batch, date)?;
        }
        Ok(())
    }

    fn write(
        writer: &mut Option<(FileWriter<BufWriter<File>>, tempfile::TempPath)>,
        dates: &mut Vec<i32>,
        batch: RecordBatch,
        date: i32,
    ) -> Result<()> {
        let (writer, _) = match writer {
            Some(writer) => writer,
            None => {
                let file =
                    tempfile::NamedTempFile::new().context("cannot create a spill file in the temporary folder")?;
                let (file, path) = file.into_parts();
                let options = IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
                let ipc = FileWriter::try_new_with_options(BufWriter::new(file), &batch.schema(), options)?;
                writer.insert((ipc, path))
            }
        };
        writer.write(&batch).context("cannot write to the spill file")?;
        dates.push(date);
        Ok(())
    }

    /// The rows spilled, to read back date by date; None when there are none.
    pub fn finish(mut self) -> Result<Option<Spilled>> {
        self.write_pending()?;
        let Some((mut writer, path)) = self.writer else { return Ok(None) };
        writer.finish().context("cannot finish the spill file")?;
        drop(writer);
        let mut by_date: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (index, date) in self.dates.into_iter().enumerate() {
            by_date.entry(date).or_default().push(index);
        }
        Ok(Some(Spilled { path, by_date }))
    }
}

/// A finished spill file, removed when dropped, and where each date's batches are in it.
pub struct Spilled {
    path: tempfile::TempPath,
    by_date: BTreeMap<i32, Vec<usize>>,
}

impl Spilled {
    pub fn dates(&self) -> impl Iterator<Item = i32> + '_ {
        self.by_date.keys().copied()
    }

    /// A reader of its own: writers of several threads read one spill at once.
    pub fn reader(&self) -> Result<SpillReader<'_>> {
        let file = File::open(&self.path).context("cannot open a spill file again")?;
        let reader = FileReader::try_new(BufReader::new(file), None).context("cannot read a spill file back")?;
        Ok(SpillReader { reader, by_date: &self.by_date })
    }
}

pub struct SpillReader<'a> {
    reader: FileReader<BufReader<File>>,
    by_date: &'a BTreeMap<i32, Vec<usize>>,
}

impl<'a> SpillReader<'a> {
    /// The batches of `date`, in the order they were spilled.
    pub fn batches(&mut self, date: i32) -> impl Iterator<Item = Result<RecordBatch>> + '_ {
        let by_date: &'a BTreeMap<i32, Vec<usize>> = self.by_date;
        let indexes = by_date.get(&date).map(Vec::as_slice).unwrap_or_default();
        indexes.iter().map(|&index| {
            self.reader.set_index(index)?;
            self.reader.next().context("a spill file ends early")?.context("cannot read a spill file")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;
    use std::sync::Arc;

    fn batch(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(values.to_vec())) as _)]).unwrap()
    }

    #[test]
    fn gives_back_each_dates_rows_in_the_order_they_came() -> Result<()> {
        let mut spill = Spill::default();
        assert!(Spill::default().finish()?.is_none());
        for (values, date) in [(&[1, 2][..], 10), (&[3], 10), (&[4], 11), (&[5, 6], 10), (&[7], 12), (&[8], 11)] {
            spill.push(batch(values), date)?;
        }
        let spilled = spill.finish()?.expect("rows were spilled");
        let mut reader = spilled.reader()?;
        let mut out = Vec::new();
        for date in spilled.dates().chain([13]) {
            let mut values = Vec::new();
            for batch in reader.batches(date) {
                values.extend(batch?.column(0).as_primitive::<Int64Type>().values().iter().copied());
            }
            out.push((date, values));
        }
        assert_eq!(out, [(10, vec![1, 2, 3, 5, 6]), (11, vec![4, 8]), (12, vec![7]), (13, vec![])]);
        Ok(())
    }
}
