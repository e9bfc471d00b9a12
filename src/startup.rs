//! `Application::build(settings)`: binds the listener (port 0 in tests), builds the pool and
//! the app; used by [`serve`] and by the tests alike. [`serve`] is the `serve` command: the
//! checks, the migrations, the app and the background passes beside it.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::header::STRICT_TRANSPORT_SECURITY;
use actix_web::middleware::{Condition, DefaultHeaders};
use actix_web::{App, HttpServer, web};
use futures_util::FutureExt;
use tracing_actix_web::TracingLogger;
use utoipa::OpenApi;

use crate::access::sign_in::FailedSignIns;
use crate::command::CommandError;
use crate::config::Settings;
use crate::db;
use crate::db::connection::ConnectSpec;
use crate::db::pool::SessionLimits;
use crate::db::replication::Replication;
use crate::idempotency::cleanup;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::notifications::directory::Directory;
use crate::notifications::{Notifying, Wake, retention, sender, watch};
use crate::payments::batcher::Batcher;
use crate::providers;
use crate::refunds::create::Refunds;
use crate::refunds::provider::RefundClients;
use crate::refunds::recover;
use crate::routes::app_data::{AdminToken, ApiPool, ReadPool};
use crate::routes::console::{actions, audit_page, settlements_page, sign_in};
use crate::routes::observe::observe;
use crate::routes::openapi::{self, SecuritySchemes};
use crate::routes::state::AppState;
use crate::routes::{
    admin, audit, callbacks, console, events, health, not_found, notifications, orders, portal,
    refunds, settlements, webhook_endpoints,
};
use crate::telemetry::GatewayRootSpan;
use crate::{preflight, read_caches};

/// The OpenAPI document: every route of [`configure`], from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "callback-gateway", description = "Verified payment callbacks, exactly-once ledger postings, byte-identical idempotent replays"),
    paths(
        orders::create_order,
        orders::get_order,
        refunds::create_refund,
        refunds::resolve_refund_request,
        callbacks::receive_callback,
        callbacks::replay_stored,
        admin::idempotency_record,
        admin::balances,
        events::list_events,
        events::event,
        events::attention,
        events::export_events,
        notifications::list_notifications,
        notifications::redeliver_notification,
        notifications::redeliver_merchant,
        notifications::enable_endpoint,
        notifications::disable_endpoint,
        audit::list_audit,
        settlements::list_settlements,
        webhook_endpoints::merchant_create,
        webhook_endpoints::merchant_list,
        webhook_endpoints::merchant_update,
        webhook_endpoints::merchant_delete,
        webhook_endpoints::merchant_rotate,
        webhook_endpoints::merchant_ping,
        webhook_endpoints::admin_create,
        webhook_endpoints::admin_list,
        webhook_endpoints::admin_update,
        webhook_endpoints::admin_delete,
        webhook_endpoints::admin_rotate,
        webhook_endpoints::admin_ping,
        events::merchant_events,
        events::merchant_event,
        notifications::merchant_notifications,
        portal::merchant_link,
        portal::admin_link,
        console::home,
        console::events,
        console::export,
        console::event,
        console::attention,
        console::notifications,
        console::balances,
        audit_page::audit,
        settlements_page::settlements,
        actions::replay,
        actions::redeliver,
        actions::enable_endpoint,
        actions::disable_endpoint,
        actions::resolve_refund_request,
        health::healthz,
        health::readyz,
        health::metrics,
    ),
    modifiers(&SecuritySchemes)
)]
pub struct ApiDoc;

/// The route table, kept beside the document that lists the same handlers: the app is wired
/// one step above the handlers, with no `routes` table in between.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics))
        .route("/openapi.json", web::get().to(openapi::document))
        .route("/v1/orders", web::post().to(orders::create_order))
        .route("/v1/orders/{id}", web::get().to(orders::get_order))
        .route("/v1/events", web::get().to(events::merchant_events))
        .route(
            "/v1/events/{provider}/{event_id}",
            web::get().to(events::merchant_event),
        )
        .route(
            "/v1/notifications",
            web::get().to(notifications::merchant_notifications),
        )
        .route(
            "/v1/webhook-endpoints",
            web::post().to(webhook_endpoints::merchant_create),
        )
        .route(
            "/v1/webhook-endpoints",
            web::get().to(webhook_endpoints::merchant_list),
        )
        .route(
            "/v1/webhook-endpoints/{id}",
            web::patch().to(webhook_endpoints::merchant_update),
        )
        .route(
            "/v1/webhook-endpoints/{id}",
            web::delete().to(webhook_endpoints::merchant_delete),
        )
        .route(
            "/v1/webhook-endpoints/{id}/rotate-secret",
            web::post().to(webhook_endpoints::merchant_rotate),
        )
        .route(
            "/v1/webhook-endpoints/{id}/test",
            web::post().to(webhook_endpoints::merchant_ping),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints",
            web::post().to(webhook_endpoints::admin_create),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints",
            web::get().to(webhook_endpoints::admin_list),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
            web::patch().to(webhook_endpoints::admin_update),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
            web::delete().to(webhook_endpoints::admin_delete),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/rotate-secret",
            web::post().to(webhook_endpoints::admin_rotate),
        )
        .route(
            "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/test",
            web::post().to(webhook_endpoints::admin_ping),
        )
        .route("/v1/portal-sessions", web::post().to(portal::merchant_link))
        .route(
            "/admin/merchants/{merchant_id}/portal-sessions",
            web::post().to(portal::admin_link),
        )
        .route(
            "/v1/orders/{id}/refunds",
            web::post().to(refunds::create_refund),
        )
        .route(
            "/v1/callbacks/{provider}",
            web::post().to(callbacks::receive_callback),
        )
        .route(
            "/admin/idempotency/{user_id}/{op}/{key:.*}",
            web::get().to(admin::idempotency_record),
        )
        .route(
            "/admin/merchants/{merchant_id}/balances",
            web::get().to(admin::balances),
        )
        .route("/admin/events", web::get().to(events::list_events))
        .route("/admin/events.jsonl", web::get().to(events::export_events))
        .route(
            "/admin/events/{provider}/{event_id}",
            web::get().to(events::event),
        )
        .route(
            "/admin/events/{provider}/{event_id}/replay",
            web::post().to(callbacks::replay_stored),
        )
        .route("/admin/attention", web::get().to(events::attention))
        .route("/admin/audit", web::get().to(audit::list_audit))
        .route(
            "/admin/settlements",
            web::get().to(settlements::list_settlements),
        )
        .route(
            "/admin/refund-requests/{id}/resolve",
            web::post().to(refunds::resolve_refund_request),
        )
        .route(
            "/admin/notifications",
            web::get().to(notifications::list_notifications),
        )
        .route(
            "/admin/notifications/{id}/redeliver",
            web::post().to(notifications::redeliver_notification),
        )
        .route(
            "/admin/merchants/{merchant_id}/notifications/redeliver",
            web::post().to(notifications::redeliver_merchant),
        )
        .route(
            "/admin/merchants/{merchant_id}/endpoint/enable",
            web::post().to(notifications::enable_endpoint),
        )
        .route(
            "/admin/merchants/{merchant_id}/endpoint/disable",
            web::post().to(notifications::disable_endpoint),
        )
        .service(
            web::scope("/console")
                .wrap(console::security_headers())
                .route("", web::get().to(console::home))
                .route("/login", web::get().to(sign_in::login_page))
                .route("/login", web::post().to(sign_in::login))
                .route("/logout", web::post().to(sign_in::logout))
                .route("/events", web::get().to(console::events))
                .route("/events.jsonl", web::get().to(console::export))
                .route(
                    "/events/{provider}/{event_id}",
                    web::get().to(console::event),
                )
                .route(
                    "/events/{provider}/{event_id}/replay",
                    web::post().to(actions::replay),
                )
                .route("/attention", web::get().to(console::attention))
                .route(
                    "/refund-requests/{id}/resolve",
                    web::post().to(actions::resolve_refund_request),
                )
                .route("/notifications", web::get().to(console::notifications))
                .route(
                    "/notifications/{id}/redeliver",
                    web::post().to(actions::redeliver),
                )
                .route(
                    "/merchants/{merchant_id}/endpoint/enable",
                    web::post().to(actions::enable_endpoint),
                )
                .route(
                    "/merchants/{merchant_id}/endpoint/disable",
                    web::post().to(actions::disable_endpoint),
                )
                .route("/balances", web::get().to(console::balances))
                .route("/audit", web::get().to(audit_page::audit))
                .route("/settlements", web::get().to(settlements_page::settlements))
                .route("/static/console.css", web::get().to(console::stylesheet)),
        )
        .service(
            web::scope("/portal")
                .wrap(console::security_headers())
                .route("", web::get().to(portal::home))
                .route("/open/{token}", web::get().to(portal::open_page))
                .route("/open", web::post().to(portal::open))
                .route("/logout", web::post().to(portal::logout))
                .route("/endpoints", web::post().to(portal::create))
                .route("/endpoints/{id}", web::get().to(portal::endpoint))
                .route("/endpoints/{id}", web::post().to(portal::update))
                .route("/endpoints/{id}/{action}", web::post().to(portal::act))
                .route("/notifications", web::get().to(portal::notifications_page))
                .route("/notifications/{id}", web::get().to(portal::notification))
                .route(
                    "/notifications/{id}/redeliver",
                    web::post().to(portal::redeliver),
                )
                .route("/events", web::get().to(portal::events_page))
                .route("/static/portal.css", web::get().to(portal::stylesheet)),
        );
}

/// The first wait before a refund whose provider outcome stayed unknown is sent again; it
/// doubles with each unknown outcome (docs/refunds.md).
const FIRST_REFUND_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);

/// What `refund.create` needs, for the handlers and for the recoverer in `serve`; `notifying`
/// wakes the application's notification sender.
pub fn refunds_of(settings: &Settings, notifying: Notifying) -> anyhow::Result<Refunds> {
    Ok(Refunds {
        clients: RefundClients::from_settings(&settings.providers, &settings.refunds)?,
        lease: settings.refunds.lease,
        max_retry_age: settings.refunds.max_retry_age,
        retry_backoff: FIRST_REFUND_BACKOFF,
        render: refunds::respond,
        notifying,
        commit_timeout: settings.database.commit_timeout,
    })
}

/// One year, the value HSTS guidance asks for; no `includeSubDomains`: the gateway does not
/// know what else runs under its domain.
const HSTS: &str = "max-age=31536000";

/// How long an idle client connection is kept open (actix's default is 5 s). A connection
/// the server closes just as its client sends the next request on it loses that request: the
/// client sees the connection end without an answer, and a load balancer in front answers
/// 502. So the server should not be the one that closes first: load balancers' idle timeouts
/// are around 60 s (AWS's default), and a provider's connection can sit idle for a whole
/// answer bound (statement plus commit timeout) while the provider waits on another one.
/// The failover test lost two requests so with 5 s.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);

pub struct Application {
    port: u16,
    server: Server,
    metrics: Metrics,
    notifying: Notifying,
    /// The notification sender and the endpoint watcher; they stop with the server.
    background: Vec<tokio::task::JoinHandle<()>>,
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
            custom_plans: false,
        };
        let acquire_timeout = settings.server.acquire_timeout;
        let api_limits = SessionLimits {
            custom_plans: true,
            ..limits
        };
        // Callbacks and the API write: their connections go to the primary only. The read
        // pool goes where `replica_url` says (or shares the API pool's spec).
        let spec = |url: &str, writes: bool, name: &str, limits: SessionLimits| {
            ConnectSpec::new(url, writes, acquire_timeout, name, limits.sql())
                .map_err(|e| anyhow::anyhow!("database url: {e}"))
        };
        let callback_spec = spec(&database_url, true, "callback-gateway", limits)?;
        let api_spec = spec(&database_url, true, "callback-gateway/api", api_limits)?;
        let read_spec = match &settings.database.replica_url {
            Some(replica) => Some(spec(
                replica.expose(),
                false,
                "callback-gateway/read",
                api_limits,
            )?),
            None => None,
        };
        let barrier_spec = spec(
            &database_url,
            true,
            "callback-gateway/replay-barrier",
            limits,
        )?;
        let replication = Replication::spawn(
            Box::new(move || {
                let spec = barrier_spec.clone();
                async move { spec.connect().await }.boxed()
            }),
            settings.database.commit_timeout,
        );
        let capture_batches_per_worker = settings.database.capture_batches_per_worker as usize;
        // A capture's statement commits on its own: its answer may take the statement's bound
        // and then the commit's.
        let answer_timeout = settings.database.statement_timeout + settings.database.commit_timeout;
        let metrics = Metrics::new();
        let metrics_data = web::Data::new(metrics.clone());
        let all_pools = Arc::new(Mutex::new(Vec::with_capacity(workers)));
        let providers = web::Data::new(providers::configure_all_observed(
            &settings.providers,
            metrics.provider_fetches(),
        ));
        let admin_token = web::Data::new(AdminToken(settings.admin.token.clone()));
        let directory = Arc::new(Directory::new(&settings.merchants));
        let notifying = Notifying::of(directory.clone(), Wake::default());
        let watcher = tokio::spawn(watch::watch(
            directory.clone(),
            settings.database_url()?.to_owned(),
            settings.secrets.keyring(),
            metrics.clone(),
            notifying.endpoints_changed_handle(),
        ));
        let sender = sender::spawn(
            &settings,
            directory,
            metrics.clone(),
            notifying.wake_handle().clone(),
        )?;
        let refunds = web::Data::new(refunds_of(&settings, notifying.clone())?);
        let openapi_document = web::Data::new(ApiDoc::openapi());
        let console_sessions =
            web::Data::new(console::Sessions::new(settings.console.secure_cookie));
        let failed_sign_ins = web::Data::new(FailedSignIns::default());
        let limits = web::Data::new(Limits::new(&settings.limits, metrics.clone()));
        let serves_tls = tls.is_some();
        let notifying_handle = notifying.clone();
        let head_timeout = settings.server.body_read_timeout;
        let settings = Arc::new(settings);
        let latest_migration = db::latest_migration_version();
        let server = HttpServer::new(move || {
            // Runs once per worker, on that worker's runtime.
            let pool = db::build_pool(callback_spec.clone(), pool_per_worker, acquire_timeout);
            let api_pool = db::build_pool(api_spec.clone(), api_pool_per_worker, acquire_timeout);
            let read_pool = match &read_spec {
                Some(read_spec) => {
                    db::build_pool(read_spec.clone(), api_pool_per_worker, acquire_timeout)
                }
                None => api_pool.clone(),
            };
            if let Ok(mut pools) = all_pools.lock() {
                pools.push(pool.clone());
            }
            let state = web::Data::new(AppState {
                capture_batcher: Batcher::spawn(
                    pool.clone(),
                    Metrics::clone(&metrics_data),
                    capture_batches_per_worker,
                    answer_timeout,
                ),
                pool,
                replication: replication.clone(),
                all_pools: all_pools.clone(),
                settings: settings.clone(),
                latest_migration: latest_migration.clone(),
                notifying: notifying.clone(),
                limits: limits.clone().into_inner(),
            });
            // The last wrap is the outermost: the request span encloses the observation.
            App::new()
                // Serving TLS itself, the gateway tells browsers to come back over HTTPS only
                // (behind a proxy, the proxy that terminates TLS sets this header).
                .wrap(Condition::new(
                    serves_tls,
                    DefaultHeaders::new().add((STRICT_TRANSPORT_SECURITY, HSTS)),
                ))
                .wrap(actix_web::middleware::from_fn(observe))
                .wrap(TracingLogger::<GatewayRootSpan>::new())
                .app_data(state)
                .app_data(web::Data::new(ApiPool(api_pool)))
                .app_data(web::Data::new(ReadPool(read_pool)))
                .app_data(admin_token.clone())
                .app_data(providers.clone())
                .app_data(refunds.clone())
                .app_data(openapi_document.clone())
                .app_data(console_sessions.clone())
                .app_data(failed_sign_ins.clone())
                .app_data(limits.clone())
                .app_data(metrics_data.clone())
                .configure(configure)
                .default_service(web::to(not_found))
        })
        .workers(workers)
        // A request's head has the same bound as its body (actix's default is 5 s). actix
        // answers a late head with its own bare 408, without Retry-After; under a burst a busy
        // worker can reach a connection it accepted only seconds later, and then the 408 went
        // to a provider whose request was never slow (scripts/test saw it under load).
        .client_request_timeout(head_timeout)
        .keep_alive(KEEP_ALIVE);
        let server = match tls {
            Some(tls) => server.listen_rustls_0_23(listener, tls)?,
            None => server.listen(listener)?,
        }
        .run();
        Ok(Self {
            port,
            server,
            metrics,
            notifying: notifying_handle,
            background: vec![sender, watcher],
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

    /// Which merchants get notifications, with this application's sender to wake (the refund
    /// recoverer in `serve` stages them too).
    pub fn notifying(&self) -> Notifying {
        self.notifying.clone()
    }

    /// Serves until the server is stopped (SIGTERM and SIGINT stop it gracefully). The sender
    /// stops with it: a notification it had claimed is sent again by any gateway once its
    /// claim's lease has passed.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        for task in self.background {
            task.abort();
        }
        result
    }
}

/// The audit log rows serve's start-up check reads: the newest ones, whose chain a tampering
/// since the last start is most likely to have broken; `audit verify` walks them all.
const AUDIT_START_CHECK_ROWS: i64 = 1000;

/// Checks the newest audit rows' hash chain; true when broken. Logs the newest row's hash,
/// which a log kept outside the database anchors: a chain rewritten from the start gives
/// another. A check that cannot run (the chain's migration not applied yet) is logged, not
/// fatal: serving does not depend on it.
async fn check_audit_chain(conn: &mut diesel_async::AsyncPgConnection) -> bool {
    match crate::access::chain::verify_newest(conn, AUDIT_START_CHECK_ROWS).await {
        Ok(verdict) => match verdict.broken {
            Some(broken) => {
                tracing::error!(
                    first_break = %broken,
                    "the audit log's hash chain is broken: rows were deleted, changed or moved; run `callback-gateway audit verify`"
                );
                true
            }
            None => {
                let (newest_id, newest_hash) = verdict.newest.unwrap_or_default();
                tracing::info!(
                    rows = verdict.rows,
                    newest_id,
                    newest_hash,
                    "audit log hash chain whole (newest rows)"
                );
                false
            }
        },
        Err(error) => {
            tracing::warn!(error = %error, "the audit log's hash chain was not checked");
            false
        }
    }
}

/// The `serve` command: checks the configuration before touching the database, applies
/// pending migrations (unless `no_migrate`), runs the app and the background passes (expiry
/// cleaner, refund recoverer, read caches, notification retention) until it stops.
pub async fn serve(settings: Settings, no_migrate: bool) -> Result<(), CommandError> {
    // Before any migration: a bad TLS file must stop the deploy with exit 2 and touch nothing.
    preflight::check(&settings)?;
    let tls = settings.server.tls.is_some();
    if let Some(telemetry) = &settings.telemetry {
        let exporting = crate::telemetry::start(telemetry).map_err(anyhow::Error::from)?;
        tracing::info!(traces_url = %exporting.traces_url, "exporting traces");
        tokio::spawn(crate::telemetry::export::probe(exporting.traces_url));
    }
    if !no_migrate {
        let applied = db::run_migrations(settings.migrate_database_url()?).await?;
        tracing::info!(count = applied.len(), "migrations applied");
    }
    let audit_chain_broken;
    {
        let mut conn = db::connect(settings.database_url()?).await?;
        let role = db::roles::inspect(&mut conn)
            .await
            .map_err(anyhow::Error::from)?;
        for warning in role.warnings() {
            tracing::warn!(role = %role.name, "{warning}");
        }
        preflight::endpoints_need_a_key(&settings, &mut conn).await?;
        audit_chain_broken = check_audit_chain(&mut conn).await;
    }
    // The history pass changes the schema (adds, detaches and drops the event log's monthly
    // partitions): the owner does that, not the runtime role.
    let owner_url = settings.migrate_database_url()?.to_owned();
    let database_url = settings.database_url()?.to_owned();
    let (interval, batch_size) = (
        settings.idempotency.cleanup_interval,
        settings.idempotency.cleanup_batch_size,
    );
    let recover_interval = settings.refunds.recover_interval;
    let checkpoint_interval = settings.ledger.checkpoint_interval;
    let notification_retention = retention::Keep::of(&settings);
    let history_settings = settings.history.clone();
    let refunds_settings = settings.clone();
    let app = Application::build(settings).await?;
    app.metrics().record_audit_chain(audit_chain_broken);
    let refunds = refunds_of(&refunds_settings, app.notifying())?;
    let notifying = app.notifying();
    let cleaner = tokio::spawn(cleanup::run_periodically(
        database_url.clone(),
        interval,
        batch_size,
        app.metrics(),
    ));
    let recover_metrics = app.metrics();
    let recover_url = database_url.clone();
    let recoverer = tokio::spawn(async move {
        // A refund request it settles or fails stages its merchant's notification: not before
        // this gateway knows which merchants have an endpoint.
        notifying.until_loaded().await;
        recover::run_periodically(recover_url, refunds, recover_interval, recover_metrics).await;
    });
    let checkpointer = tokio::spawn(read_caches::run_periodically(
        database_url.clone(),
        checkpoint_interval,
    ));
    let notification_cleaner = tokio::spawn(retention::run_periodically(
        database_url.clone(),
        interval,
        notification_retention,
        batch_size,
        app.metrics(),
    ));
    let history = tokio::spawn(crate::history::pass::run_periodically(
        owner_url,
        history_settings,
        app.metrics(),
    ));
    tracing::info!(port = app.port(), tls, "callback-gateway listening");
    let result = app.run_until_stopped().await;
    history.abort();
    cleaner.abort();
    recoverer.abort();
    checkpointer.abort();
    notification_cleaner.abort();
    result.map_err(|e| CommandError::Runtime(e.into()))
}
