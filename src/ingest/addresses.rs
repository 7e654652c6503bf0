//! The `addresses` table: each host's own addresses, as its DataNode lines name them
//! ([`datanode::own_host`]). DataNode logs name their peers by address; queries map those back
//! to hosts through this small table instead of searching every logged message again.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use anyhow::Result;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::prelude::SessionContext;
use deltalake::kernel::Action;
use futures::StreamExt;

use super::datanode;
use super::discover::Daemon;
use crate::warehouse::tables::{Rows, Table, date_of_ms};
use crate::warehouse::{PartWriter, TableAppender, Warehouse};

/// A host's address seen in one file on one day.
pub struct Seen {
    host: String,
    address: String,
    pub date: i32,
    first_ms: i64,
    last_ms: i64,
    lines: i64,
}

/// The addresses a file's lines name, gathered while it is read: a handful of rows per file.
#[derive(Default)]
pub struct AddressBook {
    seen: Vec<Seen>,
}

impl AddressBook {
    /// Notes the address a DataNode line written by `host` at `ts_ms` gives its writer, if any.
    /// A loopback address names no peer: every host has it.
    pub fn note_line(&mut self, host: &str, message: &str, ts_ms: i64) {
        let Some(address) = datanode::own_host(message).filter(|a| !a.starts_with("127.")) else { return };
        let date = date_of_ms(ts_ms);
        // Lines naming the same address follow one another: the newest entry is the likeliest.
        match self.seen.iter_mut().rev().find(|s| s.date == date && s.address == address && s.host == host) {
            Some(seen) => {
                seen.first_ms = seen.first_ms.min(ts_ms);
                seen.last_ms = seen.last_ms.max(ts_ms);
                seen.lines += 1;
            }
            None => self.seen.push(Seen {
                host: host.to_string(),
                address: address.to_string(),
                date,
                first_ms: ts_ms,
                last_ms: ts_ms,
                lines: 1,
            }),
        }
    }

    /// What was gathered, leaving the book empty for the next file.
    pub fn take(&mut self) -> Vec<Seen> {
        std::mem::take(&mut self.seen)
    }
}

/// One `addresses` row, in `rows` of the date `seen.date`.
pub fn append_row(rows: &mut Rows, seen: &Seen, daemon: &str, file: &str, ingest_id: &str) {
    rows.row()
        .text(Some(&seen.host))
        .text(Some(daemon))
        .text(Some(&seen.address))
        .ms(Some(seen.first_ms))
        .ms(Some(seen.last_ms))
        .int(Some(seen.lines))
        .text(Some(file))
        .text(Some(ingest_id));
}

/// Whether the warehouse holds logs read before it had an `addresses` table: they are gone
/// through once ([`backfill`]) before anything reads or adds to it.
pub async fn needs_backfill(warehouse: &Warehouse) -> Result<bool> {
    Ok(warehouse.has_table(Table::Logs.name()).await? && !warehouse.has_table(Table::Addresses.name()).await?)
}

/// Makes the `addresses` table of a warehouse from before it out of its `logs` (`ctx` reads
/// them), with the same [`AddressBook`] as an ingest. One commit creates the table with its
/// rows and with how far `ingests` holds each source file, so that the next ingest reads no
/// file again for it.
pub async fn backfill(warehouse: &Warehouse, ctx: &SessionContext) -> Result<()> {
    // The lines [`datanode::own_host`] reads an address from, found cheaply.
    let lines = ctx
        .sql(
            "SELECT cluster, file, ingest_id, host, ts, message FROM logs
             WHERE daemon = 'datanode' AND host IS NOT NULL
               AND (message LIKE 'Receiving block%' OR message LIKE 'Received block%'
                    OR message LIKE 'src: %' OR message ~ '^/?[0-9.]+:[0-9]')",
        )
        .await?;
    let mut stream = lines.execute_stream().await?;
    // By cluster, file and ingest run, as an ingest writes them. Rows come file after file:
    // the book of the row before is the likeliest.
    let mut books: Vec<((String, String, String), AddressBook)> = Vec::new();
    let mut current = 0;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let text = |i: usize| cast(batch.column(i), &DataType::Utf8);
        let (cluster, file, ingest_id, host, message) = (text(0)?, text(1)?, text(2)?, text(3)?, text(5)?);
        let (cluster, file, ingest_id, host, message) = (
            cluster.as_string::<i32>(),
            file.as_string::<i32>(),
            ingest_id.as_string::<i32>(),
            host.as_string::<i32>(),
            message.as_string::<i32>(),
        );
        let ts = cast(batch.column(4), &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let ts = ts.as_primitive::<TimestampMicrosecondType>();
        for row in 0..batch.num_rows() {
            let key = (cluster.value(row), file.value(row), ingest_id.value(row));
            let is_key = |k: &(String, String, String)| (k.0.as_str(), k.1.as_str(), k.2.as_str()) == key;
            if !books.get(current).is_some_and(|(k, _)| is_key(k)) {
                current = match books.iter().position(|(k, _)| is_key(k)) {
                    Some(at) => at,
                    None => {
                        books.push(((key.0.to_string(), key.1.to_string(), key.2.to_string()), AddressBook::default()));
                        books.len() - 1
                    }
                };
            }
            books[current].1.note_line(host.value(row), message.value(row), ts.value(row).div_euclid(1000));
        }
    }
    let ingests = TableAppender::open(warehouse, Table::Ingests, "").await?;
    let mut actions: Vec<Action> = ingests.transactions().into_iter().map(Action::Txn).collect();
    let mut writers: BTreeMap<String, PartWriter> = BTreeMap::new();
    for ((cluster, file, ingest_id), mut book) in books {
        let writer = match writers.entry(cluster.clone()) {
            Entry::Occupied(open) => open.into_mut(),
            Entry::Vacant(new) => new.insert(PartWriter::for_new_table(warehouse, Table::Addresses, &cluster)?),
        };
        for seen in book.take() {
            let mut rows = Rows::new(Table::Addresses, seen.date);
            append_row(&mut rows, &seen, Daemon::DataNode.name(), &file, &ingest_id);
            writer.write(rows).await?;
        }
    }
    for writer in writers.into_values() {
        actions.extend(writer.finish().await?.into_iter().map(Action::Add));
    }
    warehouse.create(Table::Addresses, actions).await?;
    Ok(())
}
