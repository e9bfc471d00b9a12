//! The settings as `serve` and `check-config` read them: defaults, bounds, errors naming the field.

use std::collections::HashMap;
use std::time::Duration;

use super::rules::hours;
use super::*;

struct FakeEnv(HashMap<&'static str, &'static str>);

impl Environment for FakeEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|v| (*v).to_owned())
    }
}

fn env() -> FakeEnv {
    FakeEnv(HashMap::from([(
        "DATABASE_URL",
        "postgres://u@localhost/db",
    )]))
}

fn provider(extra: &str) -> String {
    format!(
        "[[providers]]\nname = \"acme\"\nscheme = \"hmac-sha256\"\nmerchant_id = 42\nsecrets = [\"s3cret-s3cret-s3cret\"]\n{extra}"
    )
}

fn error_of(text: &str) -> String {
    match Settings::from_toml(text, &env()) {
        Ok(_) => panic!("expected a configuration error for:\n{text}"),
        Err(e) => e.0,
    }
}

#[test]
fn an_empty_file_gives_the_contract_defaults() {
    let settings = Settings::from_toml("", &env()).unwrap();
    assert_eq!(settings.server.bind, "127.0.0.1:8080");
    assert_eq!(settings.server.body_limit_bytes, 1_048_576);
    assert_eq!(settings.server.acquire_timeout, Duration::from_secs(3));
    assert_eq!(settings.database.pool_size, 16);
    assert_eq!(settings.idempotency.ttl, Duration::from_secs(72 * 3600));
    assert_eq!(settings.idempotency.cleanup_batch_size, 5000);
}

#[test]
fn environment_overrides_the_file() {
    let env = FakeEnv(HashMap::from([
        ("DATABASE_URL", "postgres://env@localhost/db"),
        ("GATEWAY_BIND", "0.0.0.0:9999"),
    ]));
    let text =
        "[server]\nbind = \"127.0.0.1:1\"\n[database]\nurl = \"postgres://file@localhost/db\"\n";
    let settings = Settings::from_toml(text, &env).unwrap();
    assert_eq!(settings.server.bind, "0.0.0.0:9999");
    assert_eq!(
        settings.database_url().unwrap(),
        "postgres://env@localhost/db"
    );
}

#[test]
fn a_missing_database_url_names_the_field_when_it_is_needed() {
    let settings = Settings::from_toml("", &FakeEnv(HashMap::new())).unwrap();
    let err = settings.database_url().unwrap_err();
    assert!(err.0.contains("database.url"), "{}", err.0);
}

#[test]
fn an_unknown_scheme_names_the_field() {
    let text =
        "[[providers]]\nname = \"a\"\nscheme = \"md5\"\nmerchant_id = 1\nsecrets = [\"x\"]\n";
    assert!(error_of(text).contains("providers[0].scheme"));
}

#[test]
fn a_duplicate_provider_name_is_refused() {
    let text = format!("{}{}", provider(""), provider(""));
    assert!(error_of(&text).contains("providers[1].name: duplicate"));
}

#[test]
fn a_ttl_not_above_the_retry_window_is_refused_naming_the_provider() {
    let err = error_of(&provider("retry_window_hours = 72\nttl_hours = 72\n"));
    assert!(err.contains("providers[0].ttl_hours"), "{err}");
    assert!(err.contains("\"acme\""), "{err}");
}

#[test]
fn an_unset_env_secret_is_refused() {
    let text = "[admin]\ntoken = \"env:NOPE_NOT_SET\"\n";
    assert!(error_of(text).contains("admin.token: environment variable NOPE_NOT_SET"));
}

#[test]
fn a_body_limit_above_8_mib_is_refused() {
    let err = error_of("[server]\nbody_limit_bytes = 8388609\n");
    assert!(
        err.contains("server.body_limit_bytes must be between 1 and 8388608"),
        "{err}"
    );
}

#[test]
fn an_unknown_field_is_refused() {
    assert!(error_of("[server]\nbnid = \"x\"\n").contains("bnid"));
}

#[test]
fn a_standard_webhooks_secret_must_be_base64_after_its_prefix() {
    let text = "[[providers]]\nname = \"a\"\nscheme = \"standard-webhooks\"\nmerchant_id = 1\nsecrets = [\"whsec_!!!\"]\n";
    assert!(error_of(text).contains("providers[0].secrets[0]"));
}

#[test]
fn a_tls_cert_without_a_key_names_the_missing_field() {
    let err = error_of("[server]\ntls_cert = \"cert.pem\"\n");
    assert!(err.starts_with("server.tls_key is required"), "{err}");
    let err = error_of("[server]\ntls_key = \"key.pem\"\n");
    assert!(err.starts_with("server.tls_cert is required"), "{err}");
}

#[test]
fn tls_is_off_unless_both_files_are_named() {
    assert_eq!(Settings::from_toml("", &env()).unwrap().server.tls, None);
    let text = "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
    let tls = Settings::from_toml(text, &env())
        .unwrap()
        .server
        .tls
        .unwrap();
    assert_eq!(
        (tls.cert.to_str(), tls.key.to_str()),
        (Some("c.pem"), Some("k.pem"))
    );
}

#[test]
fn secrets_are_not_printed_by_debug() {
    let settings = Settings::from_toml(&provider(""), &env()).unwrap();
    let printed = format!("{settings:?}");
    assert!(!printed.contains("s3cret-s3cret-s3cret"));
    assert!(!printed.contains("postgres://u@localhost/db"));
}

#[test]
fn values_out_of_their_bounds_name_the_field() {
    let cases = [
        (provider("ttl_hours = 1000000\n"), "providers[0].ttl_hours"),
        (
            provider("retry_window_hours = 0\n"),
            "providers[0].retry_window_hours",
        ),
        (
            provider("tolerance_secs = 3601\n"),
            "providers[0].tolerance_secs",
        ),
        (
            "[server]\nacquire_timeout_ms = 60001\n".to_owned(),
            "server.acquire_timeout_ms",
        ),
        (
            "[database]\npool_size = 1001\n".to_owned(),
            "database.pool_size",
        ),
        (
            "[database]\napi_pool_size = 0\n".to_owned(),
            "database.api_pool_size",
        ),
        (
            "[idempotency]\nttl_hours = 8761\n".to_owned(),
            "idempotency.ttl_hours",
        ),
    ];
    for (text, field) in cases {
        let err = error_of(&text);
        assert!(err.starts_with(field), "{field}: {err}");
    }
}

#[test]
fn short_secrets_and_admin_tokens_are_refused() {
    let text = "[[providers]]\nname = \"a\"\nscheme = \"stripe\"\nmerchant_id = 1\nsecrets = [\"whsec_short\"]\n";
    assert!(error_of(text).contains("providers[0].secrets[0] must be at least 16 bytes"));
    // A Standard Webhooks key is measured after decoding: 12 bytes here.
    let text = "[[providers]]\nname = \"a\"\nscheme = \"standard-webhooks\"\nmerchant_id = 1\nsecrets = [\"whsec_AAAAAAAAAAAAAAAA\"]\n";
    assert!(error_of(text).contains("providers[0].secrets[0] must be at least 16 bytes"));
    assert!(error_of("[admin]\ntoken = \"short\"\n").contains("admin.token must be at least"));
}

#[test]
fn refund_apis_must_be_https_except_on_loopback() {
    for url in [
        "https://api.stripe.com",
        "http://127.0.0.1:9000",
        "http://127.5.6.7",
        "http://[::1]:8080",
        "http://localhost:1",
    ] {
        let text = provider(&format!(
            "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
        ));
        let settings = Settings::from_toml(&text, &env()).unwrap();
        assert!(settings.providers[0].refund_api.is_some(), "{url}");
    }
    for url in [
        "http://api.stripe.com",
        "http://10.0.0.1",
        "ftp://127.0.0.1",
        "nope",
    ] {
        let text = provider(&format!(
            "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
        ));
        assert!(
            error_of(&text).starts_with("providers[0].api_base_url"),
            "{url}"
        );
    }
}

#[test]
fn a_refund_api_url_with_userinfo_is_refused_without_repeating_it() {
    for url in [
        "https://ui-name:pw-in-url@api.example.com",
        "https://ui-name@api.example.com",
        "https://:pw-in-url@api.example.com",
    ] {
        let text = provider(&format!(
            "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
        ));
        let err = error_of(&text);
        assert!(err.starts_with("providers[0].api_base_url"), "{url}: {err}");
        assert!(
            !err.contains("pw-in-url") && !err.contains("ui-name"),
            "{url}: {err}"
        );
    }
}

#[test]
fn a_database_url_the_driver_cannot_read_is_refused_without_repeating_it() {
    let text = "[database]\nurl = \"postgres://u:pw-in-url@h:notaport/db\"\n";
    let err = match Settings::from_toml(text, &FakeEnv(HashMap::new())) {
        Ok(_) => panic!("the driver cannot read this port"),
        Err(e) => e.0,
    };
    assert!(err.starts_with("database.url"), "{err}");
    assert!(!err.contains("pw-in-url"), "{err}");
}

#[test]
fn a_refund_api_needs_its_key_and_the_key_is_never_printed() {
    let err = error_of(&provider("api_base_url = \"https://api.example.com\"\n"));
    assert!(err.starts_with("providers[0].api_key is required"), "{err}");
    let text = provider(
        "api_base_url = \"https://api.example.com/\"\napi_key = \"sk_live_never_printed\"\n",
    );
    let settings = Settings::from_toml(&text, &env()).unwrap();
    let api = settings.providers[0].refund_api.as_ref().unwrap();
    assert_eq!(api.base_url, "https://api.example.com");
    assert!(!format!("{settings:?}").contains("sk_live_never_printed"));
}

#[test]
fn a_lease_not_above_the_provider_timeout_is_refused() {
    let err = error_of("[refunds]\nlease_secs = 10\nprovider_timeout_ms = 10000\n");
    assert!(err.starts_with("refunds.lease_secs"), "{err}");
    let settings = Settings::from_toml("", &env()).unwrap();
    assert_eq!(settings.refunds.lease, Duration::from_secs(30));
    assert_eq!(settings.refunds.recover_interval, Duration::from_secs(10));
    assert_eq!(settings.refunds.provider_timeout, Duration::from_secs(10));
    assert_eq!(
        settings.refunds.max_retry_age,
        Duration::from_secs(20 * 3600)
    );
    assert_eq!(
        settings.refunds.pending_overdue,
        Duration::from_secs(24 * 3600)
    );
}

#[test]
fn the_console_cookie_is_secure_under_tls_per_request_behind_a_proxy_or_as_set() {
    let tls = "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
    let cases = [
        ("", SecureCookie::WhenHttps),
        (tls, SecureCookie::Always),
        ("[console]\nsecure_cookie = true\n", SecureCookie::Always),
        (
            &format!("{tls}[console]\nsecure_cookie = false\n"),
            SecureCookie::Never,
        ),
    ];
    for (text, expected) in cases {
        let settings = Settings::from_toml(text, &env()).unwrap();
        assert_eq!(settings.console.secure_cookie, expected, "{text}");
    }
    assert!(SecureCookie::WhenHttps.applies(true));
    assert!(!SecureCookie::WhenHttps.applies(false));
}

const WHSEC: &str = "whsec_bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA==";

fn merchant(extra: &str) -> String {
    format!(
        "{}[[merchants]]\nid = 42\nnotify_url = \"https://merchant.example/hooks\"\nnotify_secret = \"{WHSEC}\"\n{extra}",
        provider("")
    )
}

#[test]
fn notifications_default_to_the_contract_schedule_and_a_168_hour_retention() {
    let settings = Settings::from_toml("", &env()).unwrap();
    let n = &settings.notifications;
    assert_eq!(n.retention, Duration::from_secs(168 * 3600));
    assert_eq!(n.attempt_timeout, Duration::from_secs(15));
    assert_eq!(n.claim_lease(), Duration::from_secs(30));
    assert_eq!(
        n.retry_delays,
        [5, 300, 1800, 7200, 18_000, 36_000, 36_000].map(Duration::from_secs)
    );
    assert_eq!((n.concurrency, n.per_merchant_concurrency), (64, 8));
    assert!(settings.merchants.is_empty());
}

#[test]
fn a_merchant_with_an_endpoint_reads_env_secrets_and_never_shows_them() {
    let env = FakeEnv(HashMap::from([
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("MERCHANT_42_WHSEC", WHSEC),
    ]));
    let text = format!(
        "{}[[merchants]]\nid = 42\nnotify_url = \"http://127.0.0.1:9000/h?k=v\"\nnotify_secret = \"env:MERCHANT_42_WHSEC\"\n[[merchants]]\nid = 43\n",
        provider("")
    );
    let settings = Settings::from_toml(&text, &env).unwrap();
    let endpoint = settings.merchants[0].endpoint.as_ref().unwrap();
    assert_eq!(endpoint.secret.expose(), WHSEC);
    assert_eq!(endpoint.shown(), "http://127.0.0.1:9000/h?(query hidden)");
    assert!(settings.merchants[1].endpoint.is_none());
    assert!(!format!("{settings:?}").contains("bWVyY2hhbnQ"));
}

#[test]
fn merchants_and_notification_settings_out_of_their_bounds_name_the_field() {
    let cases = [
        (
            merchant("[[merchants]]\nid = 42\n"),
            "merchants[1].id: merchant 42 is listed twice",
        ),
        (
            "[[merchants]]\nid = 0\n".to_owned(),
            "merchants[0].id must be greater than 0",
        ),
        (
            "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\n".to_owned(),
            "merchants[0].notify_secret is required",
        ),
        (
            format!("[[merchants]]\nid = 1\nnotify_url = \"http://m.example/h\"\nnotify_secret = \"{WHSEC}\"\n"),
            "merchants[0].notify_url: must be an https:// URL",
        ),
        (
            format!("[[merchants]]\nid = 1\nnotify_url = \"https://u:p@m.example/h\"\nnotify_secret = \"{WHSEC}\"\n"),
            "merchants[0].notify_url: must not carry user:password@",
        ),
        (
            "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\nnotify_secret = \"not-a-whsec!\"\n".to_owned(),
            "merchants[0].notify_secret: a Standard Webhooks secret",
        ),
        (
            "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\nnotify_secret = \"whsec_AAAAAAAAAAAAAAAA\"\n".to_owned(),
            "merchants[0].notify_secret must be at least 16 bytes",
        ),
        (
            "[[merchants]]\nid = 1\nnotify = true\n".to_owned(),
            "unknown field `notify`",
        ),
        (
            "[notifications]\nattempt_timeout_ms = 15001\n".to_owned(),
            "notifications.attempt_timeout_ms",
        ),
        (
            "[notifications]\nconcurrency = 4\nper_merchant_concurrency = 5\n".to_owned(),
            "notifications.per_merchant_concurrency",
        ),
        (
            "[notifications]\nretry_delays_ms = []\n".to_owned(),
            "notifications.retry_delays_ms",
        ),
        (
            "[notifications]\nretention_hours = 0\n".to_owned(),
            "notifications.retention_hours",
        ),
        (
            "[notifications]\npoll_interval_ms = 60000\n".to_owned(),
            "notifications.poll_interval_ms",
        ),
    ];
    for (text, expected) in cases {
        let err = error_of(&text);
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

fn one(text: &str) -> ProviderSettings {
    Settings::from_toml(text, &env())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .providers
        .remove(0)
}

const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

#[test]
fn the_payload_defaults_to_the_schemes_own_format() {
    let adyen = one(&format!(
        "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\n"
    ));
    assert_eq!(adyen.payload, PayloadFormat::Adyen);
    let stripe = one(
        "[[providers]]\nname = \"s\"\nscheme = \"stripe\"\nmerchant_id = 1\nsecrets = [\"whsec_a_long_enough_secret\"]\n",
    );
    assert_eq!(stripe.payload, PayloadFormat::Stripe);
    assert_eq!(one(&provider("")).payload, PayloadFormat::Canonical);
}

#[test]
fn a_new_scheme_reads_only_its_own_payload() {
    let err = error_of(&format!(
        "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\npayload = \"canonical\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\n"
    ));
    assert!(err.starts_with("providers[0].payload"), "{err}");
    let err = error_of(&provider("payload = \"adyen\"\n"));
    assert!(err.starts_with("providers[0].payload"), "{err}");
}

#[test]
fn retry_windows_default_to_the_providers_published_ones_and_the_ttl_stays_above() {
    let secret = |scheme: &str| match scheme {
        "adyen" => format!("secrets = [\"{ADYEN_KEY}\"]"),
        "paypal" => "webhook_id = \"WH1\"".to_owned(),
        _ => "secrets = [\"a-long-enough-signing-secret\"]".to_owned(),
    };
    for (scheme, window) in [
        ("adyen", 720),
        ("square", 72),
        ("razorpay", 24),
        ("checkout", 30),
        ("paddle", 72),
        ("paypal", 72),
        ("stripe", 72),
    ] {
        let url = if scheme == "square" {
            "notification_url = \"https://gw.example/v1/callbacks/p\"\n"
        } else {
            ""
        };
        let p = one(&format!(
            "[[providers]]\nname = \"p\"\nscheme = \"{scheme}\"\nmerchant_id = 1\n{}\n{url}",
            secret(scheme)
        ));
        assert_eq!(p.retry_window, hours(window), "{scheme}");
        assert!(p.ttl > p.retry_window, "{scheme}");
    }
    let err = error_of(&format!(
        "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\nttl_hours = 168\n"
    ));
    assert!(err.starts_with("providers[0].ttl_hours"), "{err}");
}

#[test]
fn an_adyen_secret_is_64_hex_characters() {
    for bad in [
        "zz".repeat(32),
        "ab".repeat(31),
        "a-long-enough-signing-secret".to_owned(),
    ] {
        let err = error_of(&format!(
            "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{bad}\"]\n"
        ));
        assert!(err.starts_with("providers[0].secrets[0]"), "{bad}: {err}");
    }
}

#[test]
fn square_needs_its_notification_url_and_nobody_else_takes_one() {
    let square = "[[providers]]\nname = \"q\"\nscheme = \"square\"\nmerchant_id = 1\nsecrets = [\"a-long-enough-signing-secret\"]\n";
    assert!(error_of(square).starts_with("providers[0].notification_url is required"));
    let p = one(&format!(
        "{square}notification_url = \"https://gw.example/cb/q?x=1\"\n"
    ));
    assert_eq!(
        p.notification_url.as_deref(),
        Some("https://gw.example/cb/q?x=1")
    );
    let err = error_of(&provider("notification_url = \"https://x.example\"\n"));
    assert!(
        err.starts_with("providers[0].notification_url is only for"),
        "{err}"
    );
}

#[test]
fn paypal_takes_a_webhook_id_no_secrets_and_checks_its_hosts() {
    let paypal = "[[providers]]\nname = \"pp\"\nscheme = \"paypal\"\nmerchant_id = 1\n";
    assert!(error_of(paypal).starts_with("providers[0].webhook_id is required"));
    let err = error_of(&format!(
        "{paypal}webhook_id = \"WH1\"\nsecrets = [\"a-long-enough-signing-secret\"]\n"
    ));
    assert!(err.starts_with("providers[0].secrets"), "{err}");
    let p = one(&format!("{paypal}webhook_id = \"WH1\"\n"));
    let settings = p.paypal.unwrap();
    assert_eq!(settings.cert_url_hosts, ["paypal.com"]);
    assert_eq!(settings.extra_roots_pem, None);
    let err = error_of(&format!(
        "{paypal}webhook_id = \"WH1\"\ncert_url_hosts = [\"com\"]\n"
    ));
    assert!(err.starts_with("providers[0].cert_url_hosts"), "{err}");
    let err = error_of(&format!(
        "{paypal}webhook_id = \"WH1\"\nca_file = \"/nonexistent/ca.pem\"\n"
    ));
    assert!(err.starts_with("providers[0].ca_file"), "{err}");
    let err = error_of(&provider("webhook_id = \"WH1\"\n"));
    assert!(
        err.starts_with("providers[0].webhook_id is only for"),
        "{err}"
    );
}

#[test]
fn a_refund_api_is_only_for_canonical_and_stripe_payloads() {
    let err = error_of(&format!(
        "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\napi_base_url = \"https://x.example\"\napi_key = \"k\"\n"
    ));
    assert!(err.starts_with("providers[0].api_base_url"), "{err}");
}

#[test]
fn a_replica_url_is_read_by_the_driver_and_the_read_work_uses_it() {
    let settings = Settings::from_toml("", &env()).unwrap();
    assert_eq!(
        settings.database.read_url(),
        Some("postgres://u@localhost/db")
    );
    assert_eq!(settings.database.commit_timeout, Duration::from_secs(5));
    let text = "[database]\nreplica_url = \"postgres://u@standby:5432/db\"\n";
    let settings = Settings::from_toml(text, &env()).unwrap();
    assert_eq!(
        settings.database.read_url(),
        Some("postgres://u@standby:5432/db")
    );
    let err = error_of("[database]\nreplica_url = \"postgres://u:pw-in-url@h:notaport/db\"\n");
    assert!(err.starts_with("database.replica_url"), "{err}");
    assert!(!err.contains("pw-in-url"), "{err}");
    assert!(!format!("{settings:?}").contains("standby:5432"));
}

#[test]
fn migrations_run_as_the_migrate_url_role_else_as_the_runtime_one() {
    let settings = Settings::from_toml("", &env()).unwrap();
    assert_eq!(
        settings.migrate_database_url().unwrap(),
        "postgres://u@localhost/db"
    );
    let text = "[database]\nmigrate_url = \"postgres://owner@localhost/db\"\n";
    let settings = Settings::from_toml(text, &env()).unwrap();
    assert_eq!(
        settings.migrate_database_url().unwrap(),
        "postgres://owner@localhost/db"
    );
    assert_eq!(
        settings.database_url().unwrap(),
        "postgres://u@localhost/db"
    );
    let overridden = FakeEnv(HashMap::from([
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("DATABASE_MIGRATE_URL", "postgres://env-owner@localhost/db"),
    ]));
    let settings = Settings::from_toml(text, &overridden).unwrap();
    assert_eq!(
        settings.migrate_database_url().unwrap(),
        "postgres://env-owner@localhost/db"
    );
    let err = error_of("[database]\nmigrate_url = \"mysql://owner:pw-in-url@h/db\"\n");
    assert!(err.starts_with("database.migrate_url"), "{err}");
    assert!(!err.contains("pw-in-url"), "{err}");
    assert!(!format!("{settings:?}").contains("env-owner"));
}

#[test]
fn the_api_pool_defaults_to_four() {
    let settings = Settings::from_toml("", &env()).unwrap();
    assert_eq!(settings.database.api_pool_size, 4);
}

#[test]
fn traces_are_off_without_an_endpoint_and_take_the_collectors_base_url() {
    assert_eq!(Settings::from_toml("", &env()).unwrap().telemetry, None);
    let settings = Settings::from_toml(
        "[telemetry]\notlp_endpoint = \"http://otel-collector:4318/\"\n",
        &env(),
    )
    .unwrap();
    let telemetry = settings.telemetry.unwrap();
    assert_eq!(telemetry.traces_url, "http://otel-collector:4318/v1/traces");
    assert_eq!(telemetry.service_name, "callback-gateway");
    assert_eq!(telemetry.queue_spans, 8192);
    assert_eq!(telemetry.batch_spans, 512);
    assert_eq!(telemetry.export_timeout, Duration::from_secs(5));
}

#[test]
fn a_bad_telemetry_setting_names_its_field() {
    let cases = [
        (
            "otlp_endpoint = \"grpc://collector:4317\"",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"http://u:p@collector:4318\"",
            "user:password@",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nqueue_spans = 10\nbatch_spans = 20",
            "telemetry.batch_spans must be between 1 and 10",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nexport_timeout_ms = 10",
            "telemetry.export_timeout_ms",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\ntrace_url = \"http://jaeger/trace\"",
            "telemetry.trace_url: must contain {trace_id}",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nsampling = 0.5",
            "unknown field",
        ),
    ];
    for (section, expected) in cases {
        let error = error_of(&format!("[telemetry]\n{section}\n"));
        assert!(error.contains(expected), "{section}: {error}");
    }
}

#[test]
fn the_sample_ratio_is_a_share_of_requests_above_zero() {
    let of = |ratio: &str| {
        Settings::from_toml(
            &format!("[telemetry]\notlp_endpoint = \"http://c:4318\"\nsample_ratio = {ratio}\n"),
            &env(),
        )
        .map(|s| s.telemetry.unwrap().sample_per_million)
        .map_err(|e| e.0)
    };
    assert_eq!(of("1.0"), Ok(1_000_000));
    assert_eq!(of("0.05"), Ok(50_000));
    assert_eq!(of("0.0000001"), Ok(1));
    for bad in ["0.0", "-0.5", "1.5", "nan"] {
        let error = of(bad).unwrap_err();
        assert!(error.contains("telemetry.sample_ratio"), "{bad}: {error}");
    }
}

#[test]
fn endpoint_settings_take_a_32_byte_key_and_origins_allowed_per_merchant() {
    let env = FakeEnv(HashMap::from([
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("KEY", "dGVzdC1zZWNyZXRzLWtleS0zMi1ieXRlcy1sb25nISE="),
    ]));
    let settings = Settings::from_toml(
        "[secrets]\nkey = \"env:KEY\"\n[[merchants]]\nid = 42\n\
         allow_hosts = [\"http://LocalHost:9000\", \"https://[::1]\", \"https://10.1.2.3:8443/\"]\n",
        &env,
    )
    .unwrap();
    assert!(settings.secrets.key.is_some());
    assert!(!format!("{settings:?}").contains("dGVzdC1zZWNyZXRz"));
    let origins: Vec<String> = settings.merchants[0]
        .allow_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        origins,
        [
            "http://localhost:9000",
            "https://[::1]:443",
            "https://10.1.2.3:8443"
        ]
    );
    assert!(!settings.notifications.allow_http);
    assert_eq!(settings.notifications.secret_overlap.as_secs(), 24 * 3600);
    for (text, says) in [
        ("[secrets]\nkey = \"c2hvcnQ=\"\n", "secrets.key is 5 bytes"),
        (
            "[secrets]\nkey = \"not base64!\"\n",
            "secrets.key is not base64",
        ),
        (
            "[notifications]\nallow_hosts = [\"127.0.0.1\"]\n",
            "notifications.allow_hosts: an exemption now names an origin for one merchant",
        ),
        (
            "[[merchants]]\nid = 42\nallow_hosts = [\"https://x.example/hooks\"]\n",
            "merchants[0].allow_hosts[0]",
        ),
        (
            "[[merchants]]\nid = 42\nallow_hosts = [\"x.example\"]\n",
            "merchants[0].allow_hosts[0]",
        ),
        (
            "[notifications]\nsecret_overlap_hours = 169\n",
            "notifications.secret_overlap_hours",
        ),
    ] {
        let error = Settings::from_toml(text, &env).unwrap_err().to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn two_providers_asking_their_api_with_one_key_are_refused() {
    let text = r#"
[database]
url = "postgres://localhost/x"

[[providers]]
name = "mollie_a"
scheme = "mollie"
merchant_id = 1
api_key = "test_shared_key_0000000000"

[[providers]]
name = "mollie_b"
scheme = "mollie"
merchant_id = 2
api_key = "test_shared_key_0000000000"
"#;
    let error = Settings::from_toml(text, &ProcessEnv).unwrap_err();
    assert!(
        error.0.contains("providers[1].api_key") && error.0.contains("mollie_a"),
        "{error}"
    );
}

#[test]
fn the_account_a_fetched_resource_must_belong_to_is_each_schemes_own() {
    let provider = |scheme: &str, line: &str| {
        format!(
            "[database]\nurl = \"postgres://localhost/x\"\n\n[[providers]]\nname = \"p\"\nscheme = \"{scheme}\"\nmerchant_id = 1\napi_key = \"k_0123456789abcdef\"\nsecrets = {secrets}\n{line}\n",
            secrets = if scheme == "mollie" {
                "[]"
            } else {
                "[\"0123456789abcdef0123\"]"
            }
        )
    };
    assert!(
        Settings::from_toml(
            &provider("mollie", "profile_id = \"pfl_1\"\nmode = \"live\""),
            &ProcessEnv
        )
        .is_ok()
    );
    assert!(
        Settings::from_toml(&provider("gocardless", "creditor = \"CR1\""), &ProcessEnv).is_ok()
    );
    for (scheme, line, field) in [
        ("mollie", "mode = \"production\"", "mode"),
        ("mollie", "creditor = \"CR1\"", "creditor"),
        ("gocardless", "profile_id = \"pfl_1\"", "profile_id"),
        ("mollie", "profile_id = \"pfl/../x\"", "profile_id"),
    ] {
        let error = Settings::from_toml(&provider(scheme, line), &ProcessEnv).unwrap_err();
        assert!(error.0.contains(field), "{scheme} {line}: {error}");
    }
}

#[test]
fn paypal_asks_its_api_with_verify_fetch_a_client_id_and_its_secret() {
    let paypal = "[[providers]]\nname = \"pp\"\nscheme = \"paypal\"\nmerchant_id = 1\n";
    let p = one(&format!(
        "{paypal}verify = \"fetch\"\nclient_id = \"AeClient1\"\napi_key = \"client_secret_0123456789\"\n"
    ));
    assert!(p.asks_api());
    assert_eq!(p.paypal, None, "no signature is checked");
    let api = p.fetch_api.unwrap();
    assert_eq!(api.base_url, "https://api-m.paypal.com");
    let client = api.oauth_client.unwrap();
    assert_eq!(
        (client.client_id.as_str(), client.token_path),
        ("AeClient1", "/v1/oauth2/token")
    );
    // The signature's settings are the default's, and the default needs none of the API's.
    let signed = one(&format!(
        "{paypal}webhook_id = \"WH1\"\nverify = \"signature\"\n"
    ));
    assert!(!signed.asks_api() && signed.paypal.is_some());
    for (lines, says) in [
        (
            "verify = \"fetch\"\napi_key = \"k_0123456789abcdef\"\n",
            "providers[0].client_id is required",
        ),
        (
            "verify = \"fetch\"\nclient_id = \"AeClient1\"\n",
            "providers[0].api_key is required",
        ),
        (
            "verify = \"fetch\"\nclient_id = \"Ae:1\"\napi_key = \"k_0123456789abcdef\"\n",
            "providers[0].client_id",
        ),
        (
            "verify = \"fetch\"\nclient_id = \"AeClient1\"\napi_key = \"k_0123456789abcdef\"\nwebhook_id = \"WH1\"\n",
            "providers[0].webhook_id is only for verify = \"signature\"",
        ),
        (
            "verify = \"ask\"\nwebhook_id = \"WH1\"\n",
            "providers[0].verify",
        ),
        (
            "webhook_id = \"WH1\"\nclient_id = \"AeClient1\"\n",
            "providers[0].client_id is only for scheme paypal with verify = \"fetch\"",
        ),
    ] {
        let err = error_of(&format!("{paypal}{lines}"));
        assert!(err.starts_with(says), "{lines}: {err}");
    }
    let err = error_of(&provider("verify = \"fetch\"\n"));
    assert!(
        err.starts_with("providers[0].verify is only for scheme paypal"),
        "{err}"
    );
}
