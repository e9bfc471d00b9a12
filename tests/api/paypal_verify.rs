//! PayPal's signature verifier against a certificate host of the test's own: a CA made here,
//! a local HTTPS server for `api.paypal.localtest` (reached on 127.0.0.1 through the verifier's
//! `resolve` override, the TLS name still checked) that counts every connection, and deliveries
//! signed with the signing certificate's RSA key as PayPal signs them.
//!
//! No database: this is the verifier alone (its known-answer tests with PayPal's own vector are
//! beside the code, in src/signature/paypal/tests.rs).

use std::time::Duration;

use callback_gateway::signature::paypal::{
    FetchLimits, PaypalError, PaypalSettings, PaypalVerifier,
};
use callback_gateway::signature::scheme::SignatureError;
use chrono::{DateTime, TimeZone, Utc};

use crate::support::paypal::{
    CertServer, OTHER_SIGNING_KEY_PEM, Route, SIGNING_KEY_PEM, Signer, TestCa, WEBHOOK_ID, rsa_key,
};

const HOST: &str = "api.paypal.localtest";
const SIGNING_NAME: &str = "messageverificationcerts.paypal.localtest";
const CERT_PATH: &str = "/v1/notifications/certs/CERT-1";
const BODY: &[u8] = br#"{"id":"WH-TEST-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP-1","amount":{"currency_code":"USD","value":"10.00"},"custom_id":"order-1"}}"#;

/// A CA, its issuing intermediate, the certificate host, and PayPal's signing certificate
/// (issued by the intermediate) served at [`CERT_PATH`] with its intermediate.
struct World {
    root: TestCa,
    intermediate: TestCa,
    server: CertServer,
    signer: Signer,
    chain_pem: String,
}

impl World {
    async fn new() -> Self {
        let root = TestCa::root("Test Root CA");
        let intermediate = root.intermediate("Test Issuing CA");
        let server = CertServer::start(root.server_identity(&[HOST])).await;
        let leaf = intermediate.leaf(&rsa_key(SIGNING_KEY_PEM), &[SIGNING_NAME], None);
        let chain_pem = format!("{leaf}{}", intermediate.pem());
        server.route(CERT_PATH, Route::Pem(chain_pem.clone()));
        Self {
            root,
            intermediate,
            server,
            signer: Signer::new(SIGNING_KEY_PEM),
            chain_pem,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.server.port())
    }

    /// Hosts under `paypal.localtest` on the server's port; the test CA as extra root.
    fn settings(&self) -> PaypalSettings {
        PaypalSettings {
            cert_url_hosts: vec![format!("paypal.localtest:{}", self.server.port())],
            extra_roots_pem: Some(self.root.pem().into_bytes()),
            ..PaypalSettings::new(WEBHOOK_ID)
        }
    }

    fn limits(&self) -> FetchLimits {
        FetchLimits {
            resolve: vec![(HOST.to_owned(), self.server.addr)],
            ..FetchLimits::default()
        }
    }

    fn verifier(&self) -> PaypalVerifier {
        PaypalVerifier::with_limits(self.settings(), self.limits()).unwrap()
    }

    /// Headers of `body` signed now with the signing key, naming `path` on the host.
    fn signed(&self, path: &str, body: &[u8]) -> Vec<(String, String)> {
        self.signer
            .headers(WEBHOOK_ID, &self.url(path), body, Utc::now())
    }
}

fn refused_reason(result: Result<impl std::fmt::Debug, PaypalError>) -> &'static str {
    match result {
        Err(PaypalError::Refused(SignatureError::CertificateRefused { reason, .. })) => reason,
        other => panic!("expected a refused certificate, got {other:?}"),
    }
}

fn utc(year: i32, month: u32, day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, 12, 0, 0).unwrap()
}

#[tokio::test]
async fn a_delivery_signed_with_the_certificates_key_verifies() {
    let world = World::new().await;
    let verifier = world.verifier();
    let headers = world.signed(CERT_PATH, BODY);
    let verified = verifier.verify(&headers, BODY, Utc::now()).await.unwrap();
    assert_eq!(
        verified.naming,
        callback_gateway::signature::scheme::Naming::Body
    );
    assert!((Utc::now().timestamp() - verified.timestamp.unwrap()).abs() <= 2);
    assert_eq!(world.server.requests(CERT_PATH), 1);
}

#[tokio::test]
async fn a_tampered_body_fails() {
    let world = World::new().await;
    let headers = world.signed(CERT_PATH, BODY);
    let tampered = String::from_utf8(BODY.to_vec())
        .unwrap()
        .replace("10.00", "1000.00");
    assert_eq!(
        world
            .verifier()
            .verify(&headers, tampered.as_bytes(), Utc::now())
            .await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
}

#[tokio::test]
async fn a_signature_by_another_key_fails() {
    let world = World::new().await;
    let forger = Signer::new(OTHER_SIGNING_KEY_PEM);
    let headers = forger.headers(WEBHOOK_ID, &world.url(CERT_PATH), BODY, Utc::now());
    assert_eq!(
        world.verifier().verify(&headers, BODY, Utc::now()).await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
}

#[tokio::test]
async fn a_delivery_for_another_webhook_fails() {
    let world = World::new().await;
    let headers = world
        .signer
        .headers("OTHER0WEBHOOK0ID", &world.url(CERT_PATH), BODY, Utc::now());
    assert_eq!(
        world.verifier().verify(&headers, BODY, Utc::now()).await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
}

#[tokio::test]
async fn cert_urls_off_the_allowlist_are_refused_before_any_connection() {
    let world = World::new().await;
    let port = world.server.port();
    // Every name below would reach the counting server if it were ever looked up.
    let mut limits = world.limits();
    for host in [
        "evil.example",
        "paypal.localtest.evil.example",
        "api.paypal.com",
        "api.paypal.localtest.",
    ] {
        limits.resolve.push((host.to_owned(), world.server.addr));
    }
    let verifier = PaypalVerifier::with_limits(world.settings(), limits).unwrap();
    let cases = [
        (
            format!("https://evil.example:{port}{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
        (format!("http://{HOST}:{port}{CERT_PATH}"), "not https"),
        (
            format!("https://{HOST}:{port}@evil.example:{port}{CERT_PATH}"),
            "carries user information (user@host)",
        ),
        (
            format!("https://paypal.localtest.evil.example:{port}{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
        // The real PayPal host is not allowed by this configuration, nor another port.
        (
            format!("https://api.paypal.com{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
        (
            format!("https://{HOST}:{}{CERT_PATH}", port.wrapping_add(1)),
            "host or port not in cert_url_hosts",
        ),
        // The server's own address, as an IP literal and in disguise.
        (
            format!("https://127.0.0.1:{port}{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
        (
            format!("https://0x7f.1:{port}{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
        (
            format!("https://{HOST}.:{port}{CERT_PATH}"),
            "host ends with a dot",
        ),
        // A name that resolves nowhere: refused as not allowed, not as a failed lookup.
        (
            format!("https://cert.nowhere.invalid{CERT_PATH}"),
            "host or port not in cert_url_hosts",
        ),
    ];
    for (url, why) in cases {
        let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, Utc::now());
        assert_eq!(
            verifier.verify(&headers, BODY, Utc::now()).await,
            Err(PaypalError::Refused(SignatureError::CertUrlRefused(why))),
            "{url}"
        );
    }
    assert_eq!(
        world.server.connections(),
        0,
        "no URL may be fetched before the allowlist"
    );
}

#[tokio::test]
async fn the_default_allowlist_never_allows_the_test_host_or_an_address() {
    let world = World::new().await;
    let settings = PaypalSettings {
        cert_url_hosts: PaypalSettings::new(WEBHOOK_ID).cert_url_hosts,
        ..world.settings()
    };
    let verifier = PaypalVerifier::with_limits(settings, world.limits()).unwrap();
    for url in [
        world.url(CERT_PATH),
        format!("https://127.0.0.1:{}{CERT_PATH}", world.server.port()),
        format!("https://localhost:{}{CERT_PATH}", world.server.port()),
        format!("https://[::1]{CERT_PATH}"),
    ] {
        let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, Utc::now());
        assert!(
            matches!(
                verifier.verify(&headers, BODY, Utc::now()).await,
                Err(PaypalError::Refused(SignatureError::CertUrlRefused(_)))
            ),
            "{url}"
        );
    }
    assert_eq!(world.server.connections(), 0);
}

#[tokio::test]
async fn a_chain_not_issued_by_a_trusted_root_fails_is_not_cached_and_is_refused_again_for_a_minute()
 {
    let world = World::new().await;
    let stranger = TestCa::root("Somebody Else's CA");
    let leaf = stranger.leaf(&rsa_key(SIGNING_KEY_PEM), &[SIGNING_NAME], None);
    world.server.route(
        "/untrusted",
        Route::Pem(format!("{leaf}{}", stranger.pem())),
    );
    let verifier = world.verifier();
    let now = Utc::now();
    // The refusal is remembered for the URL (a minute by default): a repeat costs no fetch.
    for (at, fetches) in [
        (now, 1),
        (now + chrono::Duration::seconds(59), 1),
        (now + chrono::Duration::seconds(61), 2),
    ] {
        let headers = world.signed("/untrusted", BODY);
        assert_eq!(
            refused_reason(verifier.verify(&headers, BODY, at).await),
            "untrusted chain"
        );
        assert_eq!(world.server.requests("/untrusted"), fetches, "at {at}");
    }
    assert_eq!(verifier.cached_certificates(), 0);
}

#[tokio::test]
async fn a_self_signed_certificate_in_paypals_name_fails() {
    let world = World::new().await;
    let key = rsa_key(SIGNING_KEY_PEM);
    let mut params = rcgen::CertificateParams::new(vec![SIGNING_NAME.to_owned()]).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let forged = params.self_signed(&key).unwrap().pem();
    world.server.route("/forged", Route::Pem(forged));
    let headers = world.signed("/forged", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "untrusted chain"
    );
}

#[tokio::test]
async fn a_signing_certificate_for_another_host_fails() {
    let world = World::new().await;
    // Properly issued by the trusted CA, but for a name outside cert_url_hosts.
    let leaf = world
        .intermediate
        .leaf(&rsa_key(SIGNING_KEY_PEM), &["evil.example"], None);
    world.server.route(
        "/other-name",
        Route::Pem(format!("{leaf}{}", world.intermediate.pem())),
    );
    let headers = world.signed("/other-name", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "name not in cert_url_hosts"
    );
}

#[tokio::test]
async fn an_expired_signing_certificate_fails_at_the_given_now_and_not_inside_its_dates() {
    let world = World::new().await;
    let leaf = world.intermediate.leaf(
        &rsa_key(SIGNING_KEY_PEM),
        &[SIGNING_NAME],
        Some(((2020, 1, 1), (2021, 1, 1))),
    );
    world.server.route(
        "/expired",
        Route::Pem(format!("{leaf}{}", world.intermediate.pem())),
    );
    let url = world.url("/expired");
    let verifier = world.verifier();

    // Today: the leaf expired years ago.
    let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, Utc::now());
    assert_eq!(
        refused_reason(verifier.verify(&headers, BODY, Utc::now()).await),
        "expired"
    );
    assert_eq!(verifier.cached_certificates(), 0);

    // The gateway's clock inside the leaf's dates (the TLS handshake still uses the real
    // clock): the same chain verifies, and is cached.
    let then = utc(2020, 6, 1);
    let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, then);
    assert!(verifier.verify(&headers, BODY, then).await.is_ok());
    assert_eq!(verifier.cached_certificates(), 1);

    // Once cached, a delivery at a later clock is still refused (and the chain fetched again
    // in case it was renewed).
    let later = utc(2021, 6, 1);
    let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, later);
    assert_eq!(
        refused_reason(verifier.verify(&headers, BODY, later).await),
        "expired"
    );
    assert_eq!(world.server.requests("/expired"), 3);
    assert_eq!(verifier.cached_certificates(), 0);
}

#[tokio::test]
async fn a_signing_certificate_not_yet_valid_fails() {
    let world = World::new().await;
    let leaf = world.intermediate.leaf(
        &rsa_key(SIGNING_KEY_PEM),
        &[SIGNING_NAME],
        Some(((2090, 1, 1), (2091, 1, 1))),
    );
    world.server.route(
        "/future",
        Route::Pem(format!("{leaf}{}", world.intermediate.pem())),
    );
    let headers = world.signed("/future", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "not yet valid"
    );
}

#[tokio::test]
async fn a_redirect_from_the_cert_url_is_not_followed() {
    let world = World::new().await;
    world
        .server
        .route("/moved", Route::Redirect(world.url(CERT_PATH)));
    let headers = world.signed("/moved", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "redirect"
    );
    assert_eq!(world.server.requests("/moved"), 1);
    assert_eq!(world.server.requests(CERT_PATH), 0);
}

#[tokio::test]
async fn an_oversized_certificate_response_is_refused() {
    let world = World::new().await;
    world.server.route(
        "/big-declared",
        Route::Oversized {
            bytes: 1024 * 1024,
            declared: true,
        },
    );
    // No Content-Length: only reading chunk by chunk with a limit stops it.
    world.server.route(
        "/big-streamed",
        Route::Oversized {
            bytes: 16 * 1024 * 1024,
            declared: false,
        },
    );
    let verifier = world.verifier();
    for path in ["/big-declared", "/big-streamed"] {
        let headers = world.signed(path, BODY);
        assert_eq!(
            refused_reason(verifier.verify(&headers, BODY, Utc::now()).await),
            "too large",
            "{path}"
        );
    }
}

#[tokio::test]
async fn an_answer_that_is_not_a_certificate_is_refused() {
    let world = World::new().await;
    world
        .server
        .route("/html", Route::Pem("<html>PayPal</html>".into()));
    let headers = world.signed("/html", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "not a PEM certificate"
    );
}

#[tokio::test]
async fn paypal_failing_is_transient_and_a_missing_certificate_is_not() {
    let world = World::new().await;
    world.server.route("/busy", Route::Status(503));
    world.server.route("/throttled", Route::Status(429));
    world.server.route("/stall", Route::Stall);
    let mut limits = world.limits();
    limits.timeout = Duration::from_millis(800);
    limits.connect_timeout = Duration::from_millis(800);
    let verifier = PaypalVerifier::with_limits(world.settings(), limits).unwrap();
    for path in ["/busy", "/throttled", "/stall"] {
        let headers = world.signed(path, BODY);
        assert!(
            matches!(
                verifier.verify(&headers, BODY, Utc::now()).await,
                Err(PaypalError::CertificateUnavailable(_))
            ),
            "{path}"
        );
    }
    // 404 on PayPal's own host: the URL names nothing, and a retry would find nothing either.
    let headers = world.signed("/missing", BODY);
    assert_eq!(
        refused_reason(verifier.verify(&headers, BODY, Utc::now()).await),
        "unexpected status"
    );
    // An allowed host that does not resolve, and one with nothing listening: the network.
    let mut settings = world.settings();
    settings.cert_url_hosts.push("paypal-test.invalid".into());
    settings
        .cert_url_hosts
        .push("refused.paypal.localtest:1".into());
    let mut limits = world.limits();
    limits.timeout = Duration::from_secs(3);
    limits.resolve.push((
        "refused.paypal.localtest".into(),
        "127.0.0.1:1".parse().unwrap(),
    ));
    let verifier = PaypalVerifier::with_limits(settings, limits).unwrap();
    for url in [
        format!("https://cert.paypal-test.invalid{CERT_PATH}"),
        format!("https://refused.paypal.localtest:1{CERT_PATH}"),
    ] {
        let headers = world.signer.headers(WEBHOOK_ID, &url, BODY, Utc::now());
        assert!(
            matches!(
                verifier.verify(&headers, BODY, Utc::now()).await,
                Err(PaypalError::CertificateUnavailable(_))
            ),
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_transient_failure_is_answered_from_memory_for_5_s_then_fetched_again() {
    let world = World::new().await;
    world.server.route("/flaky", Route::Status(502));
    let verifier = world.verifier();
    let headers = world.signed("/flaky", BODY);
    let now = Utc::now();
    for at in [now, now + chrono::Duration::seconds(4)] {
        assert!(matches!(
            verifier.verify(&headers, BODY, at).await,
            Err(PaypalError::CertificateUnavailable(_))
        ));
    }
    assert_eq!(world.server.requests("/flaky"), 1);
    world
        .server
        .route("/flaky", Route::Pem(world.chain_pem.clone()));
    let later = now + chrono::Duration::seconds(6);
    assert!(verifier.verify(&headers, BODY, later).await.is_ok());
    assert_eq!(world.server.requests("/flaky"), 2);
}

/// Issue 37, finding 6: unauthenticated deliveries naming bad certificate URLs (allowed hosts,
/// so they must be fetched to be refused) must not keep a genuine first delivery out of the
/// fetch slots. Each bad URL is fetched once and its refusal remembered; a delivery whose URL
/// needs a fetch while every slot is taken waits for one instead of being answered 503.
#[tokio::test]
async fn a_flood_of_bad_certificate_urls_never_turns_a_genuine_delivery_away() {
    let world = World::new().await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let bad = ["/bad-0", "/bad-1"];
    for path in bad {
        world.server.route(
            path,
            Route::Held {
                gate: gate.clone(),
                status: 404,
            },
        );
    }
    let mut limits = world.limits();
    limits.max_concurrent_fetches = 2;
    let verifier =
        std::sync::Arc::new(PaypalVerifier::with_limits(world.settings(), limits).unwrap());
    let flood = |n: usize| {
        (0..n)
            .map(|i| {
                let headers = world.signed(bad[i % bad.len()], BODY);
                let verifier = verifier.clone();
                tokio::spawn(async move { verifier.verify(&headers, BODY, Utc::now()).await })
            })
            .collect::<Vec<_>>()
    };
    // Both fetch slots taken by the flood's two URLs, held by the host.
    let first_wave = flood(40);
    crate::support::until("both bad URLs being fetched", async || {
        bad.iter().all(|path| world.server.requests(path) == 1)
    })
    .await;
    // PayPal's genuine delivery, its certificate not fetched yet.
    let genuine = {
        let headers = world.signed(CERT_PATH, BODY);
        let verifier = verifier.clone();
        tokio::spawn(async move { verifier.verify(&headers, BODY, Utc::now()).await })
    };
    crate::support::until(
        "the genuine delivery waiting for a slot (or answered)",
        async || verifier.fetches_waiting() == 1 || genuine.is_finished(),
    )
    .await;
    open.send(true).unwrap();
    let verdict = genuine.await.unwrap();
    assert!(verdict.is_ok(), "the genuine delivery: {verdict:?}");
    for delivery in first_wave {
        assert_eq!(refused_reason(delivery.await.unwrap()), "unexpected status");
    }
    // The flood goes on: answered from memory, no fetch, no slot.
    for delivery in flood(40) {
        assert_eq!(refused_reason(delivery.await.unwrap()), "unexpected status");
    }
    for path in bad {
        assert_eq!(world.server.requests(path), 1, "{path} fetched once");
    }
    assert_eq!(world.server.requests(CERT_PATH), 1);
}

#[tokio::test]
async fn a_second_delivery_for_the_same_url_makes_no_second_fetch() {
    let world = World::new().await;
    let verifier = world.verifier();
    for body in [BODY, br#"{"id":"WH-TEST-2"}"#.as_slice()] {
        let headers = world.signed(CERT_PATH, body);
        verifier.verify(&headers, body, Utc::now()).await.unwrap();
    }
    // A bad signature on a cached certificate is still refused, without a fetch.
    let forged = Signer::new(OTHER_SIGNING_KEY_PEM).headers(
        WEBHOOK_ID,
        &world.url(CERT_PATH),
        BODY,
        Utc::now(),
    );
    assert_eq!(
        verifier.verify(&forged, BODY, Utc::now()).await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
    assert_eq!(world.server.requests(CERT_PATH), 1);
    assert_eq!(world.server.connections(), 1);
    assert_eq!(verifier.cached_certificates(), 1);
}

#[tokio::test]
async fn concurrent_first_deliveries_for_one_url_share_one_fetch() {
    let world = World::new().await;
    let verifier = world.verifier();
    let deliveries: Vec<_> = (0..20).map(|_| world.signed(CERT_PATH, BODY)).collect();
    let results = futures_util::future::join_all(
        deliveries
            .iter()
            .map(|headers| verifier.verify(headers, BODY, Utc::now())),
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(world.server.requests(CERT_PATH), 1);
}

#[tokio::test]
async fn the_cache_stays_bounded() {
    let world = World::new().await;
    let limits = FetchLimits {
        cache_capacity: 2,
        ..world.limits()
    };
    let verifier = PaypalVerifier::with_limits(world.settings(), limits).unwrap();
    let paths: Vec<String> = (1..=5).map(|i| format!("/certs/{i}")).collect();
    for path in &paths {
        world
            .server
            .route(path, Route::Pem(world.chain_pem.clone()));
        let headers = world.signed(path, BODY);
        verifier.verify(&headers, BODY, Utc::now()).await.unwrap();
        assert!(verifier.cached_certificates() <= 2);
    }
    // The two most recent are still held; the first was dropped and is fetched again.
    for path in &paths[3..] {
        let headers = world.signed(path, BODY);
        verifier.verify(&headers, BODY, Utc::now()).await.unwrap();
        assert_eq!(world.server.requests(path), 1, "{path}");
    }
    let headers = world.signed(&paths[0], BODY);
    verifier.verify(&headers, BODY, Utc::now()).await.unwrap();
    assert_eq!(world.server.requests(&paths[0]), 2);
    assert_eq!(verifier.cached_certificates(), 2);
}

#[tokio::test]
async fn a_leaf_served_alone_verifies_when_ca_file_holds_its_issuer() {
    // PayPal's SDKs ship the issuing CA and may get the leaf alone from the URL.
    let world = World::new().await;
    let leaf = world
        .intermediate
        .leaf(&rsa_key(SIGNING_KEY_PEM), &[SIGNING_NAME], None);
    world.server.route("/leaf-only", Route::Pem(leaf));
    let headers = world.signed("/leaf-only", BODY);
    assert_eq!(
        refused_reason(world.verifier().verify(&headers, BODY, Utc::now()).await),
        "untrusted chain"
    );
    let settings = PaypalSettings {
        extra_roots_pem: Some(
            format!("{}{}", world.root.pem(), world.intermediate.pem()).into_bytes(),
        ),
        ..world.settings()
    };
    let verifier = PaypalVerifier::with_limits(settings, world.limits()).unwrap();
    assert!(verifier.verify(&headers, BODY, Utc::now()).await.is_ok());
}

/// How the real binary's tests configure it: a certificate host on 127.0.0.1 or localhost,
/// allowed explicitly, with no DNS override.
#[tokio::test]
async fn an_explicitly_allowed_ip_literal_or_localhost_works_without_any_override() {
    let root = TestCa::root("Local Test CA");
    let server = CertServer::start(root.server_identity(&["127.0.0.1", "localhost"])).await;
    let port = server.port();
    let key = rsa_key(SIGNING_KEY_PEM);
    // The signing certificate names the allowed host too: an address, or localhost.
    server.route("/ip.pem", Route::Pem(root.leaf(&key, &["127.0.0.1"], None)));
    server.route(
        "/name.pem",
        Route::Pem(root.leaf(&key, &["localhost"], None)),
    );
    let signer = Signer::new(SIGNING_KEY_PEM);
    for (host_entry, url) in [
        (
            format!("127.0.0.1:{port}"),
            format!("https://127.0.0.1:{port}/ip.pem"),
        ),
        (
            format!("localhost:{port}"),
            format!("https://localhost:{port}/name.pem"),
        ),
    ] {
        let settings = PaypalSettings {
            cert_url_hosts: vec![host_entry],
            extra_roots_pem: Some(root.pem().into_bytes()),
            ..PaypalSettings::new(WEBHOOK_ID)
        };
        let verifier = PaypalVerifier::new(settings).unwrap();
        let headers = signer.headers(WEBHOOK_ID, &url, BODY, Utc::now());
        assert!(
            verifier.verify(&headers, BODY, Utc::now()).await.is_ok(),
            "{url}"
        );
    }
}
