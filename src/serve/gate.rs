//! What stands before `datafusion-flight-sql-server`'s service: the token, checked on every
//! call; the limit on queries running at once; writes (`DoPut` other than parameters) and
//! Substrait plans refused (those would not pass the read-only check of SQL); the catalog
//! named in catalog calls that leave it out; and Kahuna's
//! query files, whose several statements (`CREATE TABLE … AS` steps, then the answer) and
//! `@param`s one Flight SQL statement cannot hold: they run here, parameters bound by name.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    Any, Command, CommandGetDbSchemas, CommandGetTables, CommandPreparedStatementQuery, CommandStatementQuery,
    DoPutPreparedStatementResult, ProstMessageExt as _, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionConfig;
use datafusion_flight_sql_server::service::FlightSqlService;
use datafusion_flight_sql_server::state::QueryHandle;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use prost::Message as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status, Streaming};

use super::sessions::Sessions;
use crate::diagnose;
use crate::diagnose::queries::Query;

type BoxedStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A script's answer waits this long for its `DoGet`.
const SCRIPT_RESULT_TTL: Duration = Duration::from_secs(600);
const SCRIPT_TICKET: &str = "kahuna-script:";
/// The prepared-statement handle of a query file: this, then [`Script`] as JSON.
const SCRIPT_HANDLE: &[u8] = b"kahuna-script\n";

/// A query file and the parameter values bound to it, carried by the client in its handle.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Script {
    sql: String,
    params: Vec<(String, String)>,
}

impl Script {
    fn handle(&self) -> bytes::Bytes {
        let mut handle = SCRIPT_HANDLE.to_vec();
        handle.extend(serde_json::to_vec(self).expect("a script serializes"));
        handle.into()
    }

    fn from_handle(handle: &[u8]) -> Option<Result<Script, Status>> {
        let json = handle.strip_prefix(SCRIPT_HANDLE)?;
        Some(serde_json::from_slice(json).map_err(|e| Status::invalid_argument(format!("a damaged handle: {e}"))))
    }
}

/// When a script ran, and its last statement's schema and rows.
type ScriptAnswer = (Instant, SchemaRef, Vec<RecordBatch>);

pub struct Gate {
    inner: FlightSqlService,
    sessions: Arc<Sessions>,
    token: Option<String>,
    running: Arc<Semaphore>,
    scripts: std::sync::Mutex<HashMap<u64, ScriptAnswer>>,
    next_script: AtomicU64,
}

impl Gate {
    pub fn new(inner: FlightSqlService, sessions: Arc<Sessions>, token: Option<String>, max_queries: usize) -> Gate {
        Gate {
            inner,
            sessions,
            token,
            running: Arc::new(Semaphore::new(max_queries)),
            scripts: std::sync::Mutex::new(HashMap::new()),
            next_script: AtomicU64::new(0),
        }
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(token) = &self.token else { return Ok(()) };
        let given = request.metadata().get("authorization").and_then(|value| value.to_str().ok());
        match given.and_then(|value| value.strip_prefix("Bearer ")) {
            Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err(Status::unauthenticated("wrong bearer token")),
            None => Err(Status::unauthenticated("this server wants `authorization: Bearer <token>` on every call")),
        }
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.running.clone().acquire_owned().await.map_err(|_| Status::unavailable("the server is shutting down"))
    }

    /// Runs a query file in one session of its own, its `@param`s bound to the values given (the
    /// defaults for the rest), and keeps its last statement's answer for the `DoGet` that
    /// fetches it.
    async fn run_script(&self, script: Script, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        let query = Query::parse("flight", "the statement sent", &script.sql).map_err(invalid)?;
        let ctx = self.sessions.session().await.map_err(|e| Status::unavailable(crate::error_message(&e)))?;
        let mut request = diagnose::Request::new(query);
        request.params = script.params;
        let executed = diagnose::execute(&ctx, &request).await.map_err(invalid)?;
        let schema = executed.last_schema.ok_or_else(|| Status::invalid_argument("the script holds no statement"))?;
        let id = self.next_script.fetch_add(1, Ordering::Relaxed);
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_descriptor(descriptor)
            .with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket {
                    ticket: TicketStatementQuery { statement_handle: format!("{SCRIPT_TICKET}{id}").into() }
                        .as_any()
                        .encode_to_vec()
                        .into(),
                }),
            );
        let mut scripts = self.scripts.lock().map_err(|_| Status::internal("script results poisoned"))?;
        scripts.retain(|_, (at, _, _)| at.elapsed() < SCRIPT_RESULT_TTL);
        scripts.insert(id, (Instant::now(), schema, executed.last));
        Ok(info)
    }

    /// The answer a script left under `id`, taken: it is fetched once.
    fn script_result(&self, id: &str) -> Result<BoxedStream<FlightData>, Status> {
        let id: u64 = id.parse().map_err(|_| Status::invalid_argument("not a ticket of this server"))?;
        let mut scripts = self.scripts.lock().map_err(|_| Status::internal("script results poisoned"))?;
        let (_, schema, batches) =
            scripts.remove(&id).ok_or_else(|| Status::not_found("the script's result was fetched or has expired"))?;
        let batches = futures::stream::iter(batches.into_iter().map(Ok::<_, FlightError>));
        let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from);
        Ok(stream.boxed())
    }
}

/// The Flight SQL command packed in a descriptor's or a ticket's bytes, if they hold one.
fn command(bytes: &[u8]) -> Option<Command> {
    Any::decode(bytes).ok().and_then(|any| Command::try_from(any).ok())
}

/// `GetDbSchemas` and `GetTables` without a catalog ask for every catalog (ADBC's `GetObjects`
/// and `GetTableSchema` do), where the crate lists none: the session's one catalog is named.
fn in_every_catalog(command: Command) -> Option<Any> {
    let catalog = || Some(SessionConfig::new().options().catalog.default_catalog.clone());
    match command {
        Command::CommandGetDbSchemas(query) if query.catalog.is_none() => {
            Some(CommandGetDbSchemas { catalog: catalog(), ..query }.as_any())
        }
        Command::CommandGetTables(query) if query.catalog.is_none() => {
            Some(CommandGetTables { catalog: catalog(), ..query }.as_any())
        }
        _ => None,
    }
}

/// A query file rather than one statement: it declares parameters or holds several statements.
fn is_script(sql: &str) -> bool {
    sql.lines().any(|line| line.trim_start().starts_with("-- @"))
        || crate::catalog::parse(sql).is_ok_and(|statements| statements.len() > 1)
}

/// A parameter row's values by column name, as text (`null` for none), the way `--param`
/// gives them.
fn named_values(batches: &[RecordBatch]) -> Result<Vec<(String, String)>, Status> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(Vec::new()) };
    if rows > 1 {
        return Err(Status::invalid_argument("a query file takes one row of parameters"));
    }
    let schema = batch.schema();
    let values = schema.fields().iter().zip(batch.columns()).map(|(field, column)| {
        let value = ScalarValue::try_from_array(column, 0).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let text = if value.is_null() { "null".to_string() } else { value.to_string() };
        Ok((field.name().trim_start_matches('$').to_string(), text))
    });
    values.collect()
}

/// `batches` as one Arrow IPC stream, the form `datafusion-flight-sql-server` keeps parameters in.
fn ipc_stream(batches: &[RecordBatch]) -> Result<bytes::Bytes, Status> {
    let arrow = |e: datafusion::arrow::error::ArrowError| Status::invalid_argument(e.to_string());
    let Some(first) = batches.first() else { return Err(Status::invalid_argument("no parameters sent")) };
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, &first.schema()).map_err(arrow)?;
    for batch in batches {
        writer.write(batch).map_err(arrow)?;
    }
    writer.finish().map_err(arrow)?;
    drop(writer);
    Ok(bytes.into())
}

fn invalid(error: anyhow::Error) -> Status {
    Status::invalid_argument(crate::error_message(&error))
}

/// Equal in a time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `stream`, holding `permit` until its last item is sent or the client goes away.
fn holding<T: Send + 'static>(stream: BoxedStream<T>, permit: OwnedSemaphorePermit) -> BoxedStream<T> {
    stream
        .map(move |item| {
            let _ = &permit;
            item
        })
        .boxed()
}

#[tonic::async_trait]
impl FlightService for Gate {
    type HandshakeStream = BoxedStream<HandshakeResponse>;
    type ListFlightsStream = BoxedStream<FlightInfo>;
    type DoGetStream = BoxedStream<FlightData>;
    type DoPutStream = BoxedStream<PutResult>;
    type DoExchangeStream = BoxedStream<FlightData>;
    type DoActionStream = BoxedStream<arrow_flight::Result>;
    type ListActionsStream = BoxedStream<ActionType>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.authorize(&request)?;
        let answer = HandshakeResponse { protocol_version: 0, payload: Default::default() };
        Ok(Response::new(futures::stream::iter([Ok(answer)]).boxed()))
    }

    async fn list_flights(&self, request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.authorize(&request)?;
        self.inner.list_flights(request).await
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.authorize(&request)?;
        let command = command(&request.get_ref().cmd);
        let _permit = self.permit().await?;
        match command {
            Some(Command::CommandStatementSubstraitPlan(_)) => Err(substrait_refused()),
            Some(Command::CommandStatementQuery(CommandStatementQuery { query, .. })) if is_script(&query) => {
                let script = Script { sql: query, params: Vec::new() };
                Ok(Response::new(self.run_script(script, request.into_inner()).await?))
            }
            Some(Command::CommandPreparedStatementQuery(CommandPreparedStatementQuery {
                prepared_statement_handle,
            })) => match Script::from_handle(&prepared_statement_handle) {
                Some(script) => Ok(Response::new(self.run_script(script?, request.into_inner()).await?)),
                None => self.inner.get_flight_info(request).await,
            },
            _ => self.inner.get_flight_info(request).await,
        }
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        self.authorize(&request)?;
        self.inner.poll_flight_info(request).await
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        self.authorize(&request)?;
        self.inner.get_schema(request).await
    }

    async fn do_get(&self, mut request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        self.authorize(&request)?;
        match command(&request.get_ref().ticket) {
            Some(Command::TicketStatementQuery(TicketStatementQuery { statement_handle })) => {
                let script = std::str::from_utf8(&statement_handle).ok().and_then(|h| h.strip_prefix(SCRIPT_TICKET));
                if let Some(id) = script {
                    return Ok(Response::new(self.script_result(id)?));
                }
            }
            Some(other) => {
                if let Some(named) = in_every_catalog(other) {
                    request.get_mut().ticket = named.encode_to_vec().into();
                }
            }
            None => {}
        }
        let permit = self.permit().await?;
        let response = self.inner.do_get(request).await?;
        Ok(response.map(|stream| holding(stream, permit)))
    }

    /// Only the parameters of a prepared statement are taken: every other `DoPut` writes.
    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        self.authorize(&request)?;
        let mut messages = request.into_inner();
        let first = messages.message().await?.ok_or_else(|| Status::invalid_argument("DoPut without a message"))?;
        let descriptor =
            first.flight_descriptor.clone().ok_or_else(|| Status::invalid_argument("DoPut without a descriptor"))?;
        let command = command(&descriptor.cmd);
        let Some(Command::CommandPreparedStatementQuery(CommandPreparedStatementQuery { prepared_statement_handle })) =
            command
        else {
            return Err(Status::permission_denied("DoPut is refused: the warehouse is served read-only"));
        };
        let data = futures::stream::once(async { Ok(first) }).chain(messages).map_err(FlightError::from);
        let batches: Vec<RecordBatch> =
            FlightRecordBatchStream::new_from_flight_data(data).try_collect().await.map_err(Status::from)?;
        let handle = match Script::from_handle(&prepared_statement_handle) {
            Some(script) => Script { params: named_values(&batches)?, ..script? }.handle(),
            None => {
                let mut handle = QueryHandle::try_decode(prepared_statement_handle)?;
                handle.set_parameters(Some(ipc_stream(&batches)?));
                handle.into()
            }
        };
        let result = DoPutPreparedStatementResult { prepared_statement_handle: Some(handle) };
        Ok(Response::new(
            futures::stream::iter([Ok(PutResult { app_metadata: result.encode_to_vec().into() })]).boxed(),
        ))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.authorize(&request)?;
        self.inner.do_exchange(request).await
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        self.authorize(&request)?;
        let action = request.get_ref();
        let body = || Any::decode(&*action.body).map_err(|e| Status::invalid_argument(e.to_string()));
        match action.r#type.as_str() {
            "CreatePreparedSubstraitPlan" => return Err(substrait_refused()),
            "CreatePreparedStatement" => {
                if let Ok(Some(ActionCreatePreparedStatementRequest { query, .. })) = body()?.unpack()
                    && is_script(&query)
                {
                    // The answer's schema is known once the script has run.
                    let result = ActionCreatePreparedStatementResult {
                        prepared_statement_handle: Script { sql: query, params: Vec::new() }.handle(),
                        ..Default::default()
                    };
                    let result = arrow_flight::Result { body: result.as_any().encode_to_vec().into() };
                    return Ok(Response::new(futures::stream::iter([Ok(result)]).boxed()));
                }
            }
            "ClosePreparedStatement" => {
                if let Ok(Some(ActionClosePreparedStatementRequest { prepared_statement_handle })) = body()?.unpack()
                    && prepared_statement_handle.starts_with(SCRIPT_HANDLE)
                {
                    return Ok(Response::new(futures::stream::empty().boxed()));
                }
            }
            _ => {}
        }
        self.inner.do_action(request).await
    }

    async fn list_actions(&self, request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        self.authorize(&request)?;
        self.inner.list_actions(request).await
    }
}

fn substrait_refused() -> Status {
    Status::unimplemented("Substrait plans are not served: send SQL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3cre"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn query_files_are_scripts_and_statements_are_not() {
        assert!(is_script("CREATE TABLE a AS SELECT 1 AS x;\nSELECT x FROM a"));
        assert!(is_script("-- @param k integer = 3\nSELECT $k"));
        assert!(!is_script("SELECT host, count(*) FROM states GROUP BY host"));
        assert!(!is_script("SELECT ';' AS semicolon -- a comment"));
    }
}
