//! What `serve` checks before it touches the database, shared with `check-config` so both
//! refuse a bad configuration the same way; and the redacted summary `check-config` prints.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use rustls::ServerConfig;

use crate::config::{ConfigError, DEFAULT_CONFIG_PATH, SecureCookie, Settings};
use crate::tls;

/// Everything `serve` needs beyond parsing the file: the database URL, and the TLS files read
/// and matched (cert against key). Returns the TLS configuration when HTTPS is on.
pub fn check(settings: &Settings) -> Result<Option<ServerConfig>, ConfigError> {
    settings.database_url()?;
    settings
        .server
        .tls
        .as_ref()
        .map(tls::server_config)
        .transpose()
}

/// A summary an operator can paste into a ticket: every setting that shapes behaviour, and
/// for secrets only how many there are. The database URL is shown as the driver reads it.
/// `explicit` is the `--config` path, if any, so the summary says which file was read.
pub fn summary(settings: &Settings, explicit: Option<&Path>) -> String {
    let server = &settings.server;
    let database = &settings.database;
    let idempotency = &settings.idempotency;
    let per_worker = database.pool_size.div_ceil(server.workers as u32).max(1);
    let mut out = String::new();
    let mut line = |key: &str, value: String| {
        let _ = writeln!(out, "{key:<14}{value}");
    };
    // Without --config a missing gateway.toml is not an error (defaults apply): say so.
    line(
        "config file",
        match explicit {
            Some(path) => path.display().to_string(),
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => DEFAULT_CONFIG_PATH.to_owned(),
            None => format!("(none: no {DEFAULT_CONFIG_PATH} here; defaults and environment only)"),
        },
    );
    line("bind", server.bind.clone());
    line(
        "tls",
        match &server.tls {
            Some(files) => format!(
                "on (HTTPS, TLS 1.2+, HSTS max-age one year; cert {}, key {})",
                files.cert.display(),
                files.key.display()
            ),
            None => "off (plain HTTP: terminate TLS at a proxy in front)".to_owned(),
        },
    );
    line(
        "console",
        match settings.console.secure_cookie {
            SecureCookie::Always if server.tls.is_some() => {
                "session cookie Secure (the gateway serves TLS)".to_owned()
            }
            SecureCookie::Always => {
                "session cookie Secure ([console] secure_cookie = true)".to_owned()
            }
            SecureCookie::Never => {
                "session cookie not Secure ([console] secure_cookie = false)".to_owned()
            }
            SecureCookie::WhenHttps => {
                "session cookie Secure when the proxy says https (X-Forwarded-Proto, Forwarded)"
                    .to_owned()
            }
        },
    );
    line("workers", server.workers.to_string());
    line("body limit", format!("{} bytes", server.body_limit_bytes));
    line("acquire wait", millis(server.acquire_timeout));
    line(
        "database",
        database.url.as_ref().map_or_else(
            || "(not set)".to_owned(),
            |url| redacted_database(url.expose()),
        ),
    );
    if let Some(replica) = &database.replica_url {
        line("replica (reads)", redacted_database(replica.expose()));
    }
    line(
        "migrations",
        database.migrate_url.as_ref().map_or_else(
            || "as the database role above (no [database] migrate_url)".to_owned(),
            |url| redacted_database(url.expose()),
        ),
    );
    line("commit wait", millis(database.commit_timeout));
    line(
        "pool size",
        format!(
            "{} ({per_worker} per worker x {} workers) for callbacks",
            database.pool_size, server.workers
        ),
    );
    line(
        "capture",
        format!(
            "{} batch(es) at once per worker",
            database.capture_batches_per_worker
        ),
    );
    line(
        "api pool size",
        format!("{} for orders, admin and readiness", database.api_pool_size),
    );
    line("statement max", millis(database.statement_timeout));
    line(
        "idempotency",
        format!(
            "order ttl {}h, cleanup every {}s in batches of {}",
            idempotency.ttl.as_secs() / 3600,
            idempotency.cleanup_interval.as_secs(),
            idempotency.cleanup_batch_size
        ),
    );
    line(
        "admin token",
        if settings.admin.token.is_some() {
            "set".to_owned()
        } else {
            "not set (/admin/* answers 401)".to_owned()
        },
    );
    let refunds = &settings.refunds;
    line(
        "refunds",
        format!(
            "lease {}s, recoverer every {}s, provider timeout {} (connect {})",
            refunds.lease.as_secs(),
            refunds.recover_interval.as_secs(),
            millis(refunds.provider_timeout),
            millis(refunds.provider_connect_timeout)
        ),
    );
    line("providers", settings.providers.len().to_string());
    for p in &settings.providers {
        let _ = writeln!(
            out,
            "  {} scheme={} payload={} merchant_id={} secrets={} tolerance={}s retry_window={}h ttl={}h refund_api={} test={}",
            p.name,
            p.scheme.as_str(),
            p.payload.as_str(),
            p.merchant_id,
            p.secrets.len(),
            p.tolerance.as_secs(),
            p.retry_window.as_secs() / 3600,
            p.ttl.as_secs() / 3600,
            // The base URL is no secret; the API key is shown only as set.
            p.refund_api.as_ref().map_or_else(
                || "none".to_owned(),
                |api| format!("{} (api_key set)", api.base_url)
            ),
            p.test,
        );
        // Neither is a secret: Square's signed URL and PayPal's webhook id and certificate hosts.
        if let Some(url) = &p.notification_url {
            let _ = writeln!(out, "    notification_url={url}");
        }
        // The API a fetch-verified provider asks: its base URL and bounds, the key only as set.
        if let Some(api) = &p.fetch_api {
            let _ = writeln!(
                out,
                "    fetch_api={} (api_key set) ca_file={} fetch_timeout={}ms fetch_concurrency={}",
                api.base_url,
                if api.extra_roots_pem.is_some() {
                    "set"
                } else {
                    "none"
                },
                api.timeout.as_millis(),
                api.concurrency
            );
        }
        if let Some(public_key) = &p.public_key {
            let _ = writeln!(out, "    public_key={public_key}");
        }
        if let Some(paypal) = &p.paypal {
            let _ = writeln!(
                out,
                "    webhook_id={} cert_url_hosts={} ca_file={}",
                paypal.webhook_id,
                paypal.cert_url_hosts.join(","),
                if paypal.extra_roots_pem.is_some() {
                    "set"
                } else {
                    "none"
                }
            );
        }
    }
    let notifications = &settings.notifications;
    let _ = writeln!(
        out,
        "{:<14}{} in flight ({} per merchant), attempt timeout {}, {} retries, delivered kept {}h",
        "notifications",
        notifications.concurrency,
        notifications.per_merchant_concurrency,
        millis(notifications.attempt_timeout),
        notifications.retry_delays.len(),
        notifications.retention.as_secs() / 3600
    );
    let traces = settings.telemetry.as_ref().map_or_else(
        || "off (no [telemetry] otlp_endpoint)".to_owned(),
        |t| {
            format!(
                "OTLP/HTTP to {} as {}, queue {} spans, batch {}, export timeout {}",
                t.traces_url,
                t.service_name,
                t.queue_spans,
                t.batch_spans,
                millis(t.export_timeout)
            )
        },
    );
    let _ = writeln!(out, "{:<14}{}", "traces", traces);
    let _ = writeln!(
        out,
        "{:<14}{}; endpoints by API: http {}, secret overlap {}h",
        "secrets",
        if settings.secrets.key.is_some() {
            "[secrets] key set (32 bytes)"
        } else {
            "no [secrets] key (endpoints by API are off)"
        },
        if notifications.allow_http {
            "allowed"
        } else {
            "refused"
        },
        notifications.secret_overlap.as_secs() / 3600,
    );
    let _ = writeln!(out, "{:<14}{}", "merchants", settings.merchants.len());
    for m in &settings.merchants {
        // The URL without its query (it may carry a token); the secret only as set.
        let _ = writeln!(
            out,
            "  {} notify_url={}{}",
            m.id,
            m.endpoint.as_ref().map_or_else(
                || "none (no notifications)".to_owned(),
                |e| format!("{} (notify_secret set)", e.shown())
            ),
            if m.allow_hosts.is_empty() {
                String::new()
            } else {
                let origins: Vec<String> = m.allow_hosts.iter().map(ToString::to_string).collect();
                format!(" allow_hosts={}", origins.join(","))
            },
        );
    }
    out
}

fn millis(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// The database URL as the driver reads it (tokio-postgres, under diesel-async): hosts, ports,
/// user, database, whether a password is set, and the session attributes asked for. Built from
/// the parsed fields, never from the text, so no password (in the userinfo or the query, with
/// `/`, `?` or `@` in it) can reach the summary.
fn redacted_database(url: &str) -> String {
    let Some((config, tls)) = crate::db::tls::split(url)
        .ok()
        .and_then(|(url, tls)| Some((url.parse::<tokio_postgres::Config>().ok()?, tls)))
    else {
        // Config validation refuses such a URL; say nothing of its text.
        return "(unreadable by the driver)".to_owned();
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let or_default = |values: Vec<String>, default: &str| {
        if values.is_empty() {
            default.to_owned()
        } else {
            values.join(",")
        }
    };
    let mut out = format!(
        "host={} port={} user={} dbname={} password={}",
        or_default(hosts, "(default)"),
        or_default(ports, "5432"),
        config.get_user().unwrap_or("(default)"),
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(default)"),
        if config.get_password().is_some() {
            "set"
        } else {
            "none"
        },
    );
    use tokio_postgres::config::TargetSessionAttrs;
    match config.get_target_session_attrs() {
        TargetSessionAttrs::Any => {}
        TargetSessionAttrs::ReadWrite => out.push_str(" target_session_attrs=read-write"),
        TargetSessionAttrs::ReadOnly => out.push_str(" target_session_attrs=read-only"),
        _ => out.push_str(" target_session_attrs=(other)"),
    }
    out.push_str(" sslmode=");
    out.push_str(tls.mode.as_str());
    match &tls.root_cert {
        Some(crate::db::tls::RootCert::System) => out.push_str(" sslrootcert=system"),
        Some(crate::db::tls::RootCert::File(path)) => {
            out.push_str(" sslrootcert=");
            out.push_str(path);
        }
        None => {}
    }
    out
}

/// With no `[secrets] key`, the endpoints made by API cannot be signed for: `serve` refuses to
/// start (and `check-config` says so) once the database holds one, rather than letting their
/// notifications fail one by one.
/// `check-config`: the runtime role as the database sees it, on stdout, and a warning on
/// stderr when it owns tables or is a superuser (what `serve` logs at start).
pub async fn report_runtime_role(conn: &mut diesel_async::AsyncPgConnection) {
    match crate::db::roles::inspect(conn).await {
        Ok(role) => {
            println!("{:<14}{}", "runtime role", role.describe());
            for warning in role.warnings() {
                eprintln!("check-config: WARNING: {warning}");
            }
        }
        Err(error) => eprintln!("check-config: the runtime role was not checked: {error}"),
    }
}

pub async fn endpoints_need_a_key(
    settings: &Settings,
    conn: &mut diesel_async::AsyncPgConnection,
) -> Result<(), crate::command::CommandError> {
    if settings.secrets.key.is_some() {
        return Ok(());
    }
    let held = crate::notifications::endpoints::count(conn)
        .await
        .map_err(anyhow::Error::from)?;
    if held > 0 {
        return Err(ConfigError(format!(
            "secrets.key is required: the database holds {held} merchant endpoint(s) made by API, whose secrets it seals (set [secrets] key = \"env:GATEWAY_SECRETS_KEY\", 32 bytes of base64)"
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_password_never_reaches_the_summary() {
        for (url, shown) in [
            (
                "postgres://app:hunter2@db:5432/gateway",
                "host=db port=5432 user=app dbname=gateway password=set sslmode=prefer",
            ),
            // The driver reads the credentials up to the first `@`: `/` and `?` are password.
            (
                "postgres://app:hun/ter?2@db/gateway",
                "host=db port=5432 user=app dbname=gateway password=set sslmode=prefer",
            ),
            (
                "postgres://db/gateway?user=app&password=hunter2",
                "host=db port=5432 user=app dbname=gateway password=set sslmode=prefer",
            ),
            (
                "postgres://app:pw@db/gateway?sslmode=verify-full&sslrootcert=/etc/gw/ca.pem",
                "host=db port=5432 user=app dbname=gateway password=set sslmode=verify-full sslrootcert=/etc/gw/ca.pem",
            ),
            (
                "postgresql://app@db/gateway",
                "host=db port=5432 user=app dbname=gateway password=none sslmode=prefer",
            ),
        ] {
            assert_eq!(redacted_database(url), shown, "{url}");
        }
    }

    #[test]
    fn the_summary_counts_secrets_without_showing_them() {
        struct Env;
        impl crate::config::Environment for Env {
            fn var(&self, name: &str) -> Option<String> {
                match name {
                    "PLAIN_SECRET" => Some("env-secret-value-1234".to_owned()),
                    "MERCHANT_WHSEC" => {
                        Some("whsec_bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA==".to_owned())
                    }
                    _ => None,
                }
            }
        }
        let text = "[database]\nurl = \"postgres://u:pw-in-url@h/db\"\n[admin]\ntoken = \"admin-token-value-123\"\n\
            [[providers]]\nname = \"plain\"\nscheme = \"hmac-sha256\"\nmerchant_id = 43\n\
            secrets = [\"literal-secret-value-1\", \"env:PLAIN_SECRET\"]\n\
            api_base_url = \"https://api.example.com\"\napi_key = \"sk_live_api_key_value\"\n\
            [[merchants]]\nid = 43\nnotify_url = \"https://merchant.example/hooks?token=url-token-value\"\n\
            notify_secret = \"env:MERCHANT_WHSEC\"\n[[merchants]]\nid = 44\n";
        let settings = Settings::from_toml(text, &Env).unwrap();
        let summary = summary(&settings, Some(Path::new("test.toml")));
        for secret in [
            "env-secret-value-1234",
            "literal-secret-value-1",
            "admin-token-value-123",
            "pw-in-url",
            "sk_live_api_key_value",
            "url-token-value",
            "bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA",
        ] {
            assert!(!summary.contains(secret), "{secret} leaked:\n{summary}");
        }
        assert!(
            summary.contains("plain scheme=hmac-sha256 payload=canonical merchant_id=43 secrets=2"),
            "{summary}"
        );
        assert!(
            summary.contains("refund_api=https://api.example.com (api_key set)"),
            "{summary}"
        );
        assert!(summary.contains("tls           off"), "{summary}");
        assert!(
            summary.contains(
                "  43 notify_url=https://merchant.example/hooks?(query hidden) (notify_secret set)"
            ),
            "{summary}"
        );
        assert!(
            summary.contains("  44 notify_url=none (no notifications)"),
            "{summary}"
        );
        assert!(
            summary.contains("console       session cookie Secure when the proxy says https"),
            "{summary}"
        );
        assert!(
            summary.starts_with("config file   test.toml\n"),
            "{summary}"
        );
    }
}
