//! Kahuna: Hadoop cluster history as Delta Lake tables, diagnosed in SQL.
//!
//! The data path follows the folders: [`ingest`] (log files → events → SALSA states) →
//! [`warehouse`] (Delta tables) → [`catalog`] (tables for SQL, with `kahuna-udfs`) → [`shell`].

pub mod catalog;
pub mod ingest;
pub mod report;
pub mod shell;
pub mod synthetic;
pub mod warehouse;
