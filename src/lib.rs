//! Kahuna: Hadoop cluster history as Delta Lake tables, diagnosed in SQL.
//!
//! The data path follows the folders: [`ingest`] (log files → events → SALSA states) →
//! [`warehouse`] (Delta tables) → [`catalog`] (tables for SQL, with `kahuna-udfs`) → [`shell`].

pub mod catalog;
pub mod commands;
pub mod diagnose;
pub mod eval;
pub mod ingest;
pub mod queries;
pub mod report;
pub mod schedule;
pub mod shell;
pub mod simulate;
pub mod synthetic;
pub mod warehouse;
