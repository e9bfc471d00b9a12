//! The real binary: exit codes, stdout discipline, tokens, migrate and cleanup.

use std::process::{Command, Output};

use crate::support::{connect, empty_database, fresh_database};

fn gateway(args: &[&str], config: Option<&str>, database_url: Option<&str>) -> Output {
    let dir = tempdir();
    let mut command = Command::new(crate::support::gateway::gateway_binary());
    command
        .args(args)
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env_remove("GATEWAY_BIND");
    match database_url {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    if let Some(config) = config {
        std::fs::write(dir.join("gateway.toml"), config).unwrap();
    }
    let output = command.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_unknown_scheme_exits_2_naming_the_field() {
    let config =
        "[[providers]]\nname = \"acme\"\nscheme = \"md5\"\nmerchant_id = 1\nsecrets = [\"x\"]\n";
    let output = gateway(
        &["migrate"],
        Some(config),
        Some("postgres://u@127.0.0.1:1/x"),
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("providers[0].scheme"),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_ttl_within_the_retry_window_exits_2_naming_the_provider() {
    let config = "[[providers]]\nname = \"acme\"\nscheme = \"stripe\"\nmerchant_id = 1\nsecrets = [\"whsec_a_long_enough_secret\"]\nretry_window_hours = 72\nttl_hours = 48\n";
    let output = gateway(&["serve"], Some(config), Some("postgres://u@127.0.0.1:1/x"));
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("providers[0].ttl_hours") && err.contains("\"acme\""),
        "{err}"
    );
}

#[test]
fn a_missing_database_url_exits_2() {
    let output = gateway(&["migrate"], None, None);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("database.url"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_explicit_config_file_that_does_not_exist_exits_2() {
    let output = gateway(
        &["--config", "/nonexistent/gateway.toml", "migrate"],
        None,
        Some("postgres://u@h/x"),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("/nonexistent/gateway.toml"));
}

#[test]
fn a_usage_error_exits_2() {
    let output = gateway(&["frobnicate"], None, None);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn an_unreachable_database_is_a_runtime_failure_exit_1() {
    let output = gateway(
        &["migrate"],
        None,
        Some("postgres://postgres@127.0.0.1:1/nowhere"),
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
}

#[tokio::test]
async fn migrate_applies_the_migrations_to_an_empty_database() {
    let url = empty_database().await;
    let output = gateway(&["migrate"], None, Some(&url));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let client = connect(&url).await;
    let applied: i64 = client
        .query_one("SELECT count(*) FROM __diesel_schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count() as i64;
    assert_eq!(applied, on_disk, "every migration directory is applied");
}

#[tokio::test]
async fn token_issue_prints_the_token_alone_and_stores_only_its_hash() {
    let url = fresh_database().await;
    let output = gateway(&["token", "issue", "--user-id", "42"], None, Some(&url));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let token = stdout.trim_end_matches('\n');
    assert!(
        !token.contains(char::is_whitespace) && token.len() > 40,
        "stdout: {stdout:?}"
    );
    assert!(
        !stderr(&output).contains(token),
        "the token must not reach the log"
    );

    let client = connect(&url).await;
    let row = client
        .query_one("SELECT user_id, token_sha256 FROM api_tokens", &[])
        .await
        .unwrap();
    let (user_id, stored): (i64, String) = (row.get(0), row.get(1));
    assert_eq!(user_id, 42);
    use sha2::Digest;
    assert_eq!(stored, hex::encode(sha2::Sha256::digest(token.as_bytes())));
    assert_ne!(stored, token);
}

/// The base configuration with `provider` marked `test = true` (a sandbox account).
fn with_test_provider(database_url: &str, provider: &str) -> String {
    let config = crate::support::config_with(database_url, "");
    let mut table: toml::Table = config.parse().unwrap();
    for p in table["providers"].as_array_mut().unwrap() {
        if p["name"].as_str() == Some(provider) {
            p.as_table_mut()
                .unwrap()
                .insert("test".into(), toml::Value::Boolean(true));
        }
    }
    toml::to_string(&table).unwrap()
}

/// The quick start's first callback: an order, then `send-test-event` pays it.
#[tokio::test]
async fn send_test_event_signs_a_sample_that_pays_the_order() {
    for provider in [crate::support::ACME, crate::support::STRIPE] {
        let app = crate::support::spawn_app().await;
        let order = app
            .create_order(crate::support::MERCHANT, 4620, "EUR")
            .await;
        let config = with_test_provider(&app.database_url, provider);
        let order_text = order.to_string();
        let url = app.address.clone();
        let output = tokio::task::spawn_blocking(move || {
            gateway(
                &[
                    "send-test-event",
                    "--provider",
                    provider,
                    "--order",
                    &order_text,
                    "--url",
                    &url,
                ],
                Some(&config),
                None,
            )
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{provider}: {stdout}{}",
            stderr(&output)
        );
        assert!(stdout.starts_with("200 "), "{provider}: {stdout}");
        let ack: serde_json::Value =
            serde_json::from_str(stdout.trim_start_matches("200 ")).unwrap();
        assert_eq!(ack["outcome"], "applied", "{provider}: {stdout}");
        assert!(
            stderr(&output).contains("/console/events"),
            "points at the console"
        );
        assert_eq!(app.order_status(order).await, "paid", "{provider}");
    }
}

#[test]
fn send_test_event_for_an_unknown_provider_exits_2_naming_the_configured_ones() {
    let config = crate::support::config_with("postgres://unused@127.0.0.1:1/x", "");
    let output = gateway(
        &["send-test-event", "--provider", "nope"],
        Some(&config),
        None,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("acme"), "{}", stderr(&output));
}

/// A provider not marked `test = true` may be a live account: a sample capture there would
/// mark a real order paid (or, without `--order`, post money to unapplied funds).
#[tokio::test]
async fn send_test_event_refuses_a_provider_not_marked_test_unless_forced() {
    let app = crate::support::spawn_app().await;
    let order = app
        .create_order(crate::support::MERCHANT, 4620, "EUR")
        .await;
    let config = crate::support::config_with(&app.database_url, "");
    let (order_text, url) = (order.to_string(), app.address.clone());
    let run = |force: bool| {
        let (config, order_text, url) = (config.clone(), order_text.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec![
                "send-test-event",
                "--provider",
                crate::support::ACME,
                "--order",
                &order_text,
                "--url",
                &url,
            ];
            if force {
                args.push("--force");
            }
            gateway(&args, Some(&config), None)
        })
    };
    let refused = run(false).await.unwrap();
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(refused.stdout.is_empty(), "nothing was sent");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("test = true") && err.contains("--force"),
        "says how to proceed: {err}"
    );
    assert_eq!(app.order_status(order).await, "pending_payment");
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries").await,
        0
    );

    let forced = run(true).await.unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(app.order_status(order).await, "paid");
}

/// A `--url` with `user:password@` (basic auth at a proxy) is used, but its password is never
/// printed: not in the POST line, not in the "no answer" error.
#[test]
fn send_test_event_never_prints_the_password_in_its_url() {
    let config = with_test_provider("postgres://unused@127.0.0.1:1/x", crate::support::ACME);
    let url = format!(
        "http://ops:url-pw-2@127.0.0.1:{}",
        crate::support::cluster::free_port()
    );
    let output = gateway(
        &[
            "send-test-event",
            "--provider",
            crate::support::ACME,
            "--url",
            &url,
        ],
        Some(&config),
        None,
    );
    let (out, err) = (String::from_utf8_lossy(&output.stdout), stderr(&output));
    assert_eq!(
        output.status.code(),
        Some(1),
        "nothing listens there: {err}"
    );
    assert!(
        !out.contains("url-pw-2") && !err.contains("url-pw-2"),
        "the URL's password reached the output:\n{out}{err}"
    );
    assert!(err.contains("127.0.0.1"), "the host is still shown: {err}");
}

/// Every provider of issue 24, each marked `test = true`, on `database_url`.
fn with_every_provider_marked_test(database_url: &str) -> String {
    let config = crate::support::config_with(database_url, &crate::support::all_providers(""));
    let mut table: toml::Table = config.parse().unwrap();
    for p in table["providers"].as_array_mut().unwrap() {
        p.as_table_mut()
            .unwrap()
            .insert("test".into(), toml::Value::Boolean(true));
    }
    toml::to_string(&table).unwrap()
}

/// `send-test-event` for each provider it can sign: the sample capture pays the order and the
/// sample refund refunds it, in the provider's own format and signature (Adyen answers
/// `[accepted]`, its item's ack is stored).
#[tokio::test]
async fn send_test_event_pays_and_refunds_an_order_for_every_provider_it_can_sign() {
    use crate::support::{ADYEN, CHECKOUT, PADDLE, RAZORPAY, SQUARE};
    for provider in [ADYEN, SQUARE, RAZORPAY, CHECKOUT, PADDLE] {
        let app = crate::support::spawn_app_with(&crate::support::all_providers("")).await;
        let order = app
            .create_order(crate::support::MERCHANT, 4620, "EUR")
            .await;
        let config = with_every_provider_marked_test(&app.database_url);
        for (event_type, status) in [
            ("payment.succeeded", "paid"),
            ("refund.succeeded", "refunded"),
        ] {
            let (config, order_text, url) =
                (config.clone(), order.to_string(), app.address.clone());
            let output = tokio::task::spawn_blocking(move || {
                gateway(
                    &[
                        "send-test-event",
                        "--provider",
                        provider,
                        "--type",
                        event_type,
                        "--order",
                        &order_text,
                        "--url",
                        &url,
                    ],
                    Some(&config),
                    None,
                )
            })
            .await
            .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{provider} {event_type}: {stdout}{}",
                stderr(&output)
            );
            if provider == ADYEN {
                assert_eq!(stdout.trim_end(), "200 [accepted]", "{provider}");
            } else {
                let ack: serde_json::Value =
                    serde_json::from_str(stdout.trim_start_matches("200 ")).unwrap();
                assert_eq!(
                    ack["outcome"], "applied",
                    "{provider} {event_type}: {stdout}"
                );
            }
            assert_eq!(
                app.order_status(order).await,
                status,
                "{provider} {event_type}"
            );
        }
    }
}

/// PayPal signs with its own private key: the gateway cannot send a PayPal test event, and
/// says so in one line without sending anything.
#[test]
fn send_test_event_refuses_paypal_and_says_why() {
    let config = with_every_provider_marked_test("postgres://unused@127.0.0.1:1/x");
    let output = gateway(
        &["send-test-event", "--provider", crate::support::PAYPAL],
        Some(&config),
        None,
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(output.stdout.is_empty());
    assert!(err.contains("private key"), "{err}");
}
