//! `Application::build(settings)`: binds the listener (port 0 in tests), builds the pool and
//! the app; used by `serve` and by the tests alike.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};
use tracing_actix_web::TracingLogger;

use crate::config::Settings;
use crate::db::{self, PgPool, SessionLimits};
use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::routes;
use crate::telemetry::GatewayRootSpan;

/// What every handler shares.
pub struct AppState {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub providers: Providers,
    pub latest_migration: String,
}

pub struct Application {
    port: u16,
    server: Server,
    pool: PgPool,
    metrics: Metrics,
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(&settings.server.bind)
            .map_err(|e| anyhow::anyhow!("cannot bind {}: {e}", settings.server.bind))?;
        let port = listener.local_addr()?.port();
        let pool = db::build_pool(
            settings.database_url()?,
            settings.database.pool_size,
            settings.server.acquire_timeout,
            SessionLimits {
                lock_timeout: settings.server.acquire_timeout,
                statement_timeout: settings.database.statement_timeout,
            },
        );
        let workers = settings.server.workers;
        let metrics = Metrics::new();
        let metrics_data = web::Data::new(metrics.clone());
        let state = web::Data::new(AppState {
            pool: pool.clone(),
            providers: Providers::from_settings(&settings.providers),
            settings: Arc::new(settings),
            latest_migration: db::latest_migration_version(),
        });
        let server = HttpServer::new(move || {
            // The last wrap is the outermost: the request span encloses the observation.
            App::new()
                .wrap(actix_web::middleware::from_fn(routes::observe))
                .wrap(TracingLogger::<GatewayRootSpan>::new())
                .app_data(state.clone())
                .app_data(metrics_data.clone())
                .configure(routes::configure)
                .default_service(web::to(routes::not_found))
        })
        .workers(workers)
        .listen(listener)?
        .run();
        Ok(Self {
            port,
            server,
            pool,
            metrics,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (gracefully) from elsewhere.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The application's metrics (the cleaner in `serve` reports into them).
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Serves until the server is stopped (SIGTERM and SIGINT stop it gracefully).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}
