//! `Application::build(settings)`: binds the listener (port 0 in tests), builds the pool and
//! the app; used by `serve` and by the tests alike.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};
use tracing_actix_web::TracingLogger;

use crate::config::Settings;
use crate::db::{self, SessionLimits};
use crate::metrics::Metrics;
use crate::payments::batcher::Batcher;
use crate::providers::Providers;
use crate::routes::{self, AppState};
use crate::telemetry::GatewayRootSpan;

pub struct Application {
    port: u16,
    server: Server,
    metrics: Metrics,
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(&settings.server.bind)
            .map_err(|e| anyhow::anyhow!("cannot bind {}: {e}", settings.server.bind))?;
        let port = listener.local_addr()?.port();
        // `serve` has checked these files already (exit 2); the tests come here directly.
        let tls = settings
            .server
            .tls
            .as_ref()
            .map(crate::tls::server_config)
            .transpose()?;
        let database_url = settings.database_url()?.to_owned();
        let workers = settings.server.workers;
        // `pool_size` is the process's total, split over the workers (each has its own pool).
        let pool_per_worker = settings.database.pool_size.div_ceil(workers as u32).max(1);
        let api_pool_per_worker = settings
            .database
            .api_pool_size
            .div_ceil(workers as u32)
            .max(1);
        let limits = SessionLimits {
            lock_timeout: settings.server.acquire_timeout,
            statement_timeout: settings.database.statement_timeout,
        };
        let acquire_timeout = settings.server.acquire_timeout;
        let metrics = Metrics::new();
        let metrics_data = web::Data::new(metrics.clone());
        let all_pools = Arc::new(Mutex::new(Vec::with_capacity(workers)));
        let providers = Providers::from_settings(&settings.providers);
        let settings = Arc::new(settings);
        let latest_migration = db::latest_migration_version();
        let server = HttpServer::new(move || {
            // Runs once per worker, on that worker's runtime.
            let pool = db::build_pool(&database_url, pool_per_worker, acquire_timeout, limits);
            let api_pool =
                db::build_pool(&database_url, api_pool_per_worker, acquire_timeout, limits);
            if let Ok(mut pools) = all_pools.lock() {
                pools.push(pool.clone());
            }
            let state = web::Data::new(AppState {
                capture_batcher: Batcher::spawn(pool.clone(), Metrics::clone(&metrics_data)),
                pool,
                api_pool,
                all_pools: all_pools.clone(),
                settings: settings.clone(),
                providers: providers.clone(),
                latest_migration: latest_migration.clone(),
            });
            // The last wrap is the outermost: the request span encloses the observation.
            App::new()
                .wrap(actix_web::middleware::from_fn(routes::observe))
                .wrap(TracingLogger::<GatewayRootSpan>::new())
                .app_data(state)
                .app_data(metrics_data.clone())
                .configure(routes::configure)
                .default_service(web::to(routes::not_found))
        })
        .workers(workers);
        let server = match tls {
            Some(tls) => server.listen_rustls_0_23(listener, tls)?,
            None => server.listen(listener)?,
        }
        .run();
        Ok(Self {
            port,
            server,
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

    /// The application's metrics (the cleaner in `serve` reports into them).
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Serves until the server is stopped (SIGTERM and SIGINT stop it gracefully).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}
