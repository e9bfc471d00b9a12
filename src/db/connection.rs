//! How a pooled connection is opened: the URL as the driver reads it with the gateway's
//! defaults, its TLS connector ([`super::tls`]), the session settings, and the watch
//! ([`super::watch`]) that every connection carries.

use std::sync::Arc;
use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::{self, SslMode};
use super::watch::{ConnectionEvents, Watch, drive};

/// How pooled connections are opened: the parsed URL with the gateway's defaults, its TLS
/// connector (`sslmode`, [`super::tls`]), and the session settings each one runs once.
#[derive(Clone)]
pub struct ConnectSpec {
    pub config: tokio_postgres::Config,
    /// `None` for `sslmode=disable`.
    tls: Option<MakeRustlsConnect>,
    sslmode: SslMode,
    pub setup_sql: String,
}

/// Why a database URL cannot be used to connect.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("the PostgreSQL driver cannot read the URL: {0}")]
    Driver(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Tls(String),
}

impl ConnectSpec {
    /// `url` as the driver reads it, plus: `target_session_attrs=read-write` when the pool
    /// writes (a multi-host URL then connects to the primary only, and a single host that is a
    /// standby is refused at connect instead of failing every write), a connect timeout when
    /// the URL names none (a dead host otherwise holds a connect attempt for minutes), and an
    /// `application_name` that tells the pools apart in `pg_stat_activity`.
    pub fn new(
        url: &str,
        writes: bool,
        connect_timeout: Duration,
        application_name: &str,
        setup_sql: String,
    ) -> Result<Self, SpecError> {
        let (url, tls) = tls::split(url).map_err(SpecError::Tls)?;
        let mut config: tokio_postgres::Config = url.parse()?;
        config.ssl_mode(tls.driver_mode());
        if writes {
            config.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(connect_timeout.max(Duration::from_secs(1)));
        }
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        Ok(Self {
            config,
            tls: tls.connector().map_err(SpecError::Tls)?,
            sslmode: tls.mode,
            setup_sql,
        })
    }

    /// Opens a connection, drives it in a task of its own on the current runtime, and runs
    /// the session settings.
    pub async fn connect(&self) -> Result<AsyncPgConnection, ConnectionError> {
        let events = Arc::new(ConnectionEvents::default());
        // The task ends when the connection's client is dropped (once no answer is pending) or
        // when the socket closes. Dropping a connection never sends a cancel request: a commit
        // that still waits for the standby keeps waiting on the server, and it is either
        // replicated or never answered 2xx.
        let refused = |e: tokio_postgres::Error| {
            ConnectionError::BadConnection(format!(
                "cannot connect (sslmode={}): {}",
                self.sslmode.as_str(),
                error_chain(&e)
            ))
        };
        let client = match &self.tls {
            Some(tls) => {
                let (client, connection) =
                    self.config.connect(tls.clone()).await.map_err(refused)?;
                tokio::spawn(drive(connection, events.clone()));
                client
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(refused)?;
                tokio::spawn(drive(connection, events.clone()));
                client
            }
        };
        let mut conn = AsyncPgConnection::try_from(client).await?;
        conn.set_instrumentation(Watch::new(events));
        if !self.setup_sql.is_empty() {
            conn.batch_execute(&self.setup_sql)
                .await
                .map_err(ConnectionError::CouldntSetupConfiguration)?;
        }
        Ok(conn)
    }
}

/// The driver's error with its causes: a TLS failure's reason (an unknown issuer, a name that
/// does not match, a server without TLS) sits underneath.
fn error_chain(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
