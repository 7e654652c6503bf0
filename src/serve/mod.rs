//! `kahuna serve`: the warehouse over Arrow Flight SQL, so that ADBC, JDBC and ODBC clients
//! query it from elsewhere. `datafusion-flight-sql-server` speaks the protocol over the
//! sessions of [`sessions`]; [`gate`] stands before it (token, limits, query files).

mod gate;
mod sessions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion::execution::context::SQLOptions;
use datafusion_flight_sql_server::service::FlightSqlService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::warehouse::Warehouse;
use gate::Gate;
use sessions::{Provider, Sessions};

pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The bearer token every call must carry; none only on a loopback address.
    pub token: Option<String>,
    /// A PEM certificate chain and its key.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub max_queries: usize,
    pub memory_per_query: usize,
}

/// Serves `warehouse` until SIGTERM or Ctrl-C, then lets the calls under way finish.
/// `listening` is told the address bound (the port chosen where `listen` gave 0).
pub async fn serve(warehouse: Warehouse, options: ServeOptions, listening: impl FnOnce(SocketAddr)) -> Result<()> {
    if options.token.is_none() && !options.listen.ip().is_loopback() {
        bail!(
            "refusing to serve {} without a token: give --token-file or KAHUNA_SERVE_TOKEN, or listen on 127.0.0.1",
            options.listen
        );
    }
    let mut server = Server::builder();
    if let Some((cert, key)) = &options.tls {
        let read = |path: &PathBuf| std::fs::read(path).with_context(|| format!("cannot read {}", path.display()));
        let identity = Identity::from_pem(read(cert)?, read(key)?);
        // Set once a process; a second call finds it set, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        server = server.tls_config(ServerTlsConfig::new().identity(identity)).context("bad TLS certificate or key")?;
    }
    if warehouse.table_names().await?.is_empty() {
        bail!("no warehouse at {warehouse}: `kahuna ingest` makes one");
    }
    let sessions = Arc::new(Sessions::new(warehouse, options.memory_per_query));
    // Fail at the start, not at the first query, on a warehouse that cannot be read.
    sessions.snapshot().await?;
    let read_only = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
    let flight_sql =
        FlightSqlService::new_with_provider(Box::new(Provider(sessions.clone()))).with_sql_options(read_only);
    let gate = Gate::new(flight_sql, sessions, options.token, options.max_queries);

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    listening(listener.local_addr()?);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    server
        .add_service(FlightServiceServer::new(gate).max_decoding_message_size(64 << 20))
        .serve_with_incoming_shutdown(incoming, shutdown())
        .await?;
    Ok(())
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
