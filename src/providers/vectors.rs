//! Known-answer tests: every vector in tests/vectors/ (the providers' official vectors, copied
//! from the shared fixtures with their sources, and our own for Checkout.com) must verify with
//! its provider's scheme, and fail once its body changes. The files are read whole, so a vector
//! added to them is tested too.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::adyen::{self, AdyenScheme};
use super::braintree::{BraintreeFormat, BraintreeScheme};
use super::checkout::CheckoutScheme;
use super::connector::Format;
use super::gocardless::GocardlessScheme;
use super::paddle::PaddleScheme;
use super::razorpay::RazorpayScheme;
use super::square::SquareScheme;
use crate::secret::Secret;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn vectors(file: &str) -> Vec<Value> {
    let path = vectors_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).unwrap();
    json["vectors"].as_array().unwrap().clone()
}

fn field<'v>(vector: &'v Value, name: &str) -> &'v str {
    vector[name]
        .as_str()
        .unwrap_or_else(|| panic!("vector {} has no {name}", vector["name"]))
}

fn header(name: &str, value: &str) -> Vec<(String, String)> {
    vec![(name.to_owned(), value.to_owned())]
}

/// Whether `vector` verifies with its provider's scheme over `body`.
fn verifies(vector: &Value, body: &[u8]) -> bool {
    // PayPal's vectors carry a certificate instead of a key and an expected value.
    let key = Secret::new(vector["key"].as_str().unwrap_or_default());
    let expected = vector["expected"].as_str().unwrap_or_default();
    match field(vector, "provider") {
        "adyen" => AdyenScheme::new(&[key]).check(body).is_ok(),
        "square" => SquareScheme::new(&[key], field(vector, "notification_url"))
            .check(&header("x-square-hmacsha256-signature", expected), body)
            .is_ok(),
        "razorpay" => RazorpayScheme::new(&[key])
            .check(&header("X-Razorpay-Signature", expected), body)
            .is_ok(),
        "checkout" => CheckoutScheme::new(&[key])
            .check(&header("Cko-Signature", expected), body)
            .is_ok(),
        "paddle" => {
            let timestamp = vector["timestamp"].as_i64().unwrap();
            PaddleScheme::new(&[key], 5)
                .check(
                    &header("Paddle-Signature", field(vector, "header")),
                    body,
                    timestamp,
                )
                .is_ok()
        }
        "paypal" => super::paypal::verifies_vector(vector, body),
        "gocardless" => gocardless_scheme(key)
            .check(&header("Webhook-Signature", expected), body)
            .is_ok(),
        // Not a provider of the gateway, but its construction is one it implements: Shopify
        // signs base64 (Square's, with nothing before the body).
        "shopify" => SquareScheme::new(&[key], "")
            .check(&header("x-square-hmacsha256-signature", expected), body)
            .is_ok(),
        other => panic!(
            "vector {} is for provider {other}, which no scheme here checks: add it",
            vector["name"]
        ),
    }
}

/// A GoCardless scheme keyed with `key` (no API: the vectors test the signature alone).
fn gocardless_scheme(key: Secret) -> GocardlessScheme {
    let text = format!(
        "[[providers]]\nname = \"g\"\nscheme = \"gocardless\"\nmerchant_id = 1\nsecrets = [{:?}]\napi_key = \"k\"\n",
        key.expose()
    );
    let settings = crate::config::Settings::from_toml(&text, &crate::config::ProcessEnv).unwrap();
    GocardlessScheme::new(&settings.providers[0], None)
}

/// The form body Braintree posts for a vector's `bt_signature` and `bt_payload`.
fn braintree_form(signature: &str, payload: &str) -> Vec<u8> {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("bt_signature", signature)
        .append_pair("bt_payload", payload)
        .finish()
        .into_bytes()
}

#[test]
fn braintrees_own_sample_notifications_verify_and_one_changed_byte_does_not() {
    let all = vectors("braintree.json");
    assert!(all.len() >= 2);
    for vector in &all {
        let name = &vector["name"];
        let scheme = BraintreeScheme::for_vector(field(vector, "public_key"), field(vector, "key"));
        let payload = field(vector, "bt_payload");
        let body = braintree_form(field(vector, "bt_signature"), payload);
        assert!(scheme.check(&body).is_ok(), "{name}");
        assert_eq!(
            BraintreeFormat.event_id(&body).unwrap(),
            format!(
                "{}:{}:{}",
                field(vector, "kind"),
                field(vector, "subject_id"),
                field(vector, "timestamp")
            ),
            "{name}"
        );
        // Every payload byte changed once (to another base64 character) fails.
        for i in (0..payload.len()).filter(|i| payload.as_bytes()[*i] != b'\n') {
            let mut changed = payload.as_bytes().to_vec();
            changed[i] = if changed[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(changed).unwrap();
            assert!(
                scheme
                    .check(&braintree_form(field(vector, "bt_signature"), &changed))
                    .is_err(),
                "{name}: byte {i} changed still verified"
            );
        }
        let mut signature = field(vector, "bt_signature").to_owned();
        let last = signature.pop().unwrap();
        signature.push(if last == '0' { '1' } else { '0' });
        assert!(
            scheme.check(&braintree_form(&signature, payload)).is_err(),
            "{name}"
        );
    }
}

fn check_all(file: &str) -> usize {
    let all = vectors(file);
    assert!(!all.is_empty(), "{file} holds no vector");
    for vector in &all {
        let name = &vector["name"];
        let body = field(vector, "body").as_bytes();
        let valid = vector["valid"].as_bool().unwrap_or(true);
        assert_eq!(verifies(vector, body), valid, "{file}: vector {name}");
        if valid {
            // One byte more is another body.
            let mut other = body.to_vec();
            other.push(b' ');
            if field(vector, "provider") != "adyen" {
                assert!(
                    !verifies(vector, &other),
                    "{file}: vector {name} verified another body"
                );
            }
        }
        if let Some(signed) = vector["signed_string"].as_str()
            && field(vector, "provider") == "adyen"
        {
            assert_eq!(
                adyen::signed_string(body).as_deref(),
                Some(signed),
                "{name}"
            );
        }
        if let Some(url) = vector["notification_url"].as_str() {
            // A one-character change of the notification URL fails.
            let mut off = vector.clone();
            let changed = format!("{}x", &url[..url.len() - 1]);
            off["notification_url"] = Value::from(changed);
            assert!(
                !verifies(&off, body),
                "{name}: URL one character off verified"
            );
        }
    }
    all.len()
}

#[test]
fn every_official_vector_verifies_with_its_scheme() {
    assert!(check_all("providers.json") >= 13);
}

#[test]
fn our_own_checkout_vector_verifies() {
    assert_eq!(check_all("own.json"), 1);
}

#[test]
fn the_repository_copy_equals_the_shared_fixtures_when_they_are_here() {
    let copy = std::fs::read(vectors_dir().join("providers.json")).unwrap();
    // The shared fixtures sit beside the checkout on the team's machine; a clean clone (CI)
    // has only the copy.
    let mut dir = Some(Path::new(env!("CARGO_MANIFEST_DIR")));
    while let Some(d) = dir {
        let shared = d.join("shared/fixtures/providers/vectors.json");
        if let Ok(original) = std::fs::read(&shared) {
            assert!(
                copy == original,
                "tests/vectors/providers.json differs from {}: copy it again",
                shared.display()
            );
            return;
        }
        dir = d.parent();
    }
}
