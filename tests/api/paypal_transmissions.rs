//! PayPal signs a CRC-32 of the body, not the body: with one genuine delivery's headers, a body
//! forged to the same CRC-32 carries a valid signature. A transmission id is good for one body
//! only (issue 37, finding 1): such a forgery is 401 and moves nothing, and finance sees it in
//! `/admin/attention`; the genuine body under the same headers is still a redelivery.

use callback_gateway::idempotency::transmission;

use crate::support::payloads::{Kind, payload};
use crate::support::paypal::forge_crc32;
use crate::support::paypal_host;
use crate::support::{MERCHANT, PAYPAL, all_providers, answer, spawn_app_with};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap()
}

#[tokio::test]
async fn a_body_forged_to_the_same_crc32_under_a_real_transmission_moves_nothing() {
    let app = spawn_app_with(&all_providers("")).await;
    let paid = app.create_order(MERCHANT, 2500, "USD").await;
    let target = app.create_order(MERCHANT, 990_000, "USD").await;
    let genuine = payload(
        PAYPAL,
        "GENUINE-1",
        "CAP-GENUINE-1",
        &Kind::Capture {
            order: Some(paid),
            amount: 2500,
            currency: "USD",
        },
    );
    let (genuine_id, genuine) = (genuine.event_id, genuine.body);
    let headers = paypal_host::signed_now(&genuine);
    let (status, _, first) = answer(app.post_callback(PAYPAL, &headers, &genuine).await).await;
    assert_eq!(
        (status, json(&first)["outcome"].as_str()),
        (200, Some("applied")),
        "{first}"
    );

    // Another event, another capture, another order, 9,900.00 USD: the filler in `summary`
    // makes its CRC-32 the genuine body's, so PayPal's signature over the genuine headers
    // verifies it as well.
    let template = format!(
        r#"{{"id":"WH-FORGED-1","event_version":"1.0","create_time":"2026-12-01T10:00:00Z","resource_type":"capture","resource_version":"2.0","event_type":"PAYMENT.CAPTURE.COMPLETED","summary":"{{FILL}}","resource":{{"id":"CAP-FORGED-1","status":"COMPLETED","final_capture":true,"amount":{{"currency_code":"USD","value":"9900.00"}},"custom_id":"{target}"}}}}"#
    );
    let forged = forge_crc32(&template, crc32fast::hash(genuine.as_bytes()))
        .expect("a CRC-32 forgery of the genuine body");
    assert_ne!(forged, genuine);
    assert_eq!(
        crc32fast::hash(forged.as_bytes()),
        crc32fast::hash(genuine.as_bytes())
    );
    let (status, _, text) = answer(app.post_callback(PAYPAL, &headers, &forged).await).await;
    assert_eq!(
        (status, json(&text)["error"].as_str()),
        (401, Some("invalid_signature")),
        "the forged body: {text}"
    );
    assert_eq!(app.order_status(target).await, "pending_payment");
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers").await,
        1,
        "only the genuine capture is in the books"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM payments WHERE payment_id = 'CAP-FORGED-1'")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries WHERE event_id = 'WH-FORGED-1'")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE idem_key LIKE '%WH-FORGED-1'")
            .await,
        0
    );

    // Finance sees the transmission that was delivered with another body.
    let attention: serde_json::Value = app
        .admin_get("/admin/attention")
        .await
        .json()
        .await
        .unwrap();
    let reused = attention["reused_transmissions"].as_array().unwrap();
    assert_eq!(reused.len(), 1, "{attention}");
    let listed = &reused[0];
    assert_eq!(
        listed["transmission_id"],
        header(&headers, "PAYPAL-TRANSMISSION-ID")
    );
    assert_eq!(listed["provider"], PAYPAL);
    assert_eq!(listed["event_id"], genuine_id.as_str());
    assert_eq!(listed["last_conflict_event_id"], "WH-FORGED-1");
    assert_eq!(listed["conflicts"], 1);

    // PayPal's own redelivery of the genuine body under its headers is still a redelivery.
    let (status, replayed, again) =
        answer(app.post_callback(PAYPAL, &headers, &genuine).await).await;
    assert_eq!((status, replayed, again), (200, true, first));
    // And a second forgery is counted on the same row.
    let (status, _, _) = answer(app.post_callback(PAYPAL, &headers, &forged).await).await;
    assert_eq!(status, 401);
    assert_eq!(
        app.count("SELECT conflicts::bigint FROM provider_transmissions")
            .await,
        2
    );
}

#[tokio::test]
async fn a_transmission_binding_is_kept_for_its_window_and_a_forgerys_row_30_days_longer() {
    let app = spawn_app_with(&all_providers("")).await;
    let db = crate::support::connect(&app.database_url).await;
    // Valid until `hours` from now.
    for (id, hours, conflicts) in [
        ("live", 1i32, 0i32),
        ("expired", -1, 0),
        ("forged-recently", -29 * 24, 1),
        ("forged-long-ago", -31 * 24, 1),
    ] {
        db.execute(
            "INSERT INTO provider_transmissions (provider, transmission_id, merchant_id, body_sha256, event_id, valid_until, conflicts) \
             VALUES ('paypal', $1, 42, 'h', 'e', now() + make_interval(hours => $2), $3)",
            &[&id, &hours, &conflicts],
        )
        .await
        .unwrap();
    }
    let mut conn = callback_gateway::db::connect(&app.database_url)
        .await
        .unwrap();
    let deleted = transmission::delete_expired(&mut conn, 1).await.unwrap();
    assert_eq!(deleted, 2);
    let kept: Vec<String> = db
        .query(
            "SELECT transmission_id FROM provider_transmissions ORDER BY transmission_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(kept, ["forged-recently", "live"]);
}
