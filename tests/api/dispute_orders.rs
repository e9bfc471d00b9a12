//! Every order of arrival of one payment's events ends in the same books and the same
//! statuses (issue 37, finding 2). Providers deliver out of order: a refund made before a
//! chargeback can arrive after it, a close before the reinstatement it ends, a reversal before
//! its chargeback. A property test: generated payments (a capture, refunds, one or two
//! disputes, each withdrawn, reinstated in full, in part or not, closed won, lost or not), each
//! delivered in many orders (every order for a few events, a sample of them beyond), one
//! payment per order on one gateway; an event answered 409 is redelivered after the next one
//! that applied, as a provider's retry would come. Then every order's ledger entries by kind
//! and account, payment (status, refunded, disputed), order status and disputes (funds,
//! outcome, amounts) must equal the first order's.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::support::payloads::{Kind, payload};
use crate::support::sign::signed_now;
use crate::support::{
    ACME, MERCHANT, PADDLE, TestApp, all_providers, answer, spawn_app, spawn_app_with,
};

/// One dispute of a generated payment.
#[derive(Debug, Clone)]
struct DisputeSpec {
    withdrawn: i64,
    fee: i64,
    reinstated: Option<i64>,
    closed: Option<&'static str>,
}

/// A generated payment: what the provider moved and said about it.
#[derive(Debug, Clone)]
struct Scenario {
    captured: i64,
    refunds: Vec<i64>,
    disputes: Vec<DisputeSpec>,
}

/// One event of a scenario, before it is given the ids of one order of arrival.
#[derive(Debug, Clone, Copy)]
enum Step {
    Capture,
    Refund(usize),
    Withdrawal(usize),
    Reinstatement(usize),
    Close(usize),
}

impl Scenario {
    fn generate(rng: &mut StdRng) -> Self {
        let captured = rng.random_range(1_000..10_000);
        let mut refunds = Vec::new();
        let mut left = captured;
        for _ in 0..rng.random_range(0..=2) {
            if left < 2 {
                break;
            }
            let refund = rng.random_range(1..=left / 2);
            refunds.push(refund);
            left -= refund;
        }
        let disputes = (0..rng.random_range(1..=2))
            .map(|_| {
                let withdrawn = rng.random_range(1..=captured);
                let reinstated = match rng.random_range(0..10) {
                    0..4 => None,
                    4..7 => Some(withdrawn),
                    _ => Some(rng.random_range(1..=withdrawn)),
                };
                DisputeSpec {
                    withdrawn,
                    fee: if rng.random_bool(0.5) {
                        rng.random_range(1..=500)
                    } else {
                        0
                    },
                    reinstated,
                    closed: [None, Some("won"), Some("lost")][rng.random_range(0..3)],
                }
            })
            .collect();
        Self {
            captured,
            refunds,
            disputes,
        }
    }

    fn steps(&self) -> Vec<Step> {
        let mut steps = vec![Step::Capture];
        steps.extend((0..self.refunds.len()).map(Step::Refund));
        for (d, dispute) in self.disputes.iter().enumerate() {
            steps.push(Step::Withdrawal(d));
            if dispute.reinstated.is_some() {
                steps.push(Step::Reinstatement(d));
            }
            if dispute.closed.is_some() {
                steps.push(Step::Close(d));
            }
        }
        steps
    }
}

/// Orders of arrival of `n` events: every one when there are at most 120, else the given
/// order, its reverse and random others, `sample` in all.
fn orders(n: usize, sample: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
    let identity: Vec<usize> = (0..n).collect();
    if (1..=n).product::<usize>() <= 120 {
        let mut all = Vec::new();
        permutations(&mut identity.clone(), 0, &mut all);
        return all;
    }
    let mut out = vec![identity.clone(), identity.iter().rev().copied().collect()];
    while out.len() < sample {
        let mut order = identity.clone();
        order.shuffle(rng);
        if !out.contains(&order) {
            out.push(order);
        }
    }
    out
}

fn permutations(items: &mut Vec<usize>, k: usize, out: &mut Vec<Vec<usize>>) {
    if k == items.len() {
        out.push(items.clone());
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permutations(items, k + 1, out);
        items.swap(k, i);
    }
}

/// A canonical event (acme, Standard Webhooks) of one order of arrival: its id and body.
fn canonical(scenario: &Scenario, tag: &str, order_id: i64, step: Step) -> (String, String) {
    let payment = format!("pay_{tag}");
    let (id, kind, data) = match step {
        Step::Capture => (
            format!("{tag}_cap"),
            "payment.succeeded",
            format!(
                r#"{{"payment_id":"{payment}","order_id":{order_id},"amount_minor":{},"currency":"USD"}}"#,
                scenario.captured
            ),
        ),
        Step::Refund(i) => (
            format!("{tag}_ref{i}"),
            "refund.succeeded",
            format!(
                r#"{{"payment_id":"{payment}","refund_id":"re_{tag}_{i}","amount_minor":{},"currency":"USD"}}"#,
                scenario.refunds[i]
            ),
        ),
        Step::Withdrawal(d) => (
            format!("{tag}_dw{d}"),
            "dispute.funds_withdrawn",
            format!(
                r#"{{"dispute_id":"dp_{tag}_{d}","payment_id":"{payment}","amount_minor":{},"currency":"USD","fee_minor":{}}}"#,
                scenario.disputes[d].withdrawn, scenario.disputes[d].fee
            ),
        ),
        Step::Reinstatement(d) => (
            format!("{tag}_dr{d}"),
            "dispute.funds_reinstated",
            format!(
                r#"{{"dispute_id":"dp_{tag}_{d}","payment_id":"{payment}","amount_minor":{},"currency":"USD"}}"#,
                scenario.disputes[d].reinstated.unwrap_or_default()
            ),
        ),
        Step::Close(d) => (
            format!("{tag}_dc{d}"),
            "dispute.closed",
            format!(
                r#"{{"dispute_id":"dp_{tag}_{d}","payment_id":"{payment}","status":"{}"}}"#,
                scenario.disputes[d].closed.unwrap_or_default()
            ),
        ),
    };
    let body = format!(r#"{{"id":"{id}","type":"{kind}","data":{data}}}"#);
    (id, body)
}

/// Delivers `events` (id, body) of `provider` in the order given, as a provider does: an event
/// answered 409 (its capture or its withdrawal not there yet) is redelivered after each later
/// event that applied, until it applies. Every other answer must be a 200.
async fn deliver_in_order(app: &TestApp, provider: &str, events: &[(String, String)]) {
    let mut waiting: Vec<&(String, String)> = Vec::new();
    for event in events {
        if !post(app, provider, event).await {
            waiting.push(event);
            continue;
        }
        // Something applied: what waited may apply now (a retry after the provider's backoff).
        loop {
            let before = waiting.len();
            let mut still = Vec::new();
            for event in waiting {
                if !post(app, provider, event).await {
                    still.push(event);
                }
            }
            waiting = still;
            if waiting.len() == before {
                break;
            }
        }
    }
    assert!(
        waiting.is_empty(),
        "events still 409 after every other arrived: {:?}",
        waiting.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
}

/// True for a 200, false for a 409 to redeliver later; anything else fails the test.
async fn post(app: &TestApp, provider: &str, (id, body): &(String, String)) -> bool {
    let (headers, body) = signed_now(provider, id, body);
    let (status, _, text) = answer(app.post_callback(provider, &headers, &body).await).await;
    match status {
        200 => true,
        409 => false,
        _ => panic!("{id}: {status} {text}"),
    }
}

/// What finance and the merchant see of one payment: its ledger entries summed by transfer
/// kind and account, the payment's status, refunded and disputed amounts, its order's status,
/// and its disputes (in the scenario's order: funds, outcome, withdrawn, fee, reinstated), and
/// how many transfers it has.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Books {
    entries: BTreeMap<(String, String), i64>,
    transfers: i64,
    payment: (String, i64, i64),
    order: String,
    disputes: Vec<(String, String, i64, i64, i64)>,
}

async fn books_of(app: &TestApp, provider: &str, payment: &str, order_id: i64) -> Books {
    let db = &app.db;
    let entries = db
        .query(
            "SELECT t.kind, e.account, sum(e.amount_minor)::bigint FROM ledger_transfers t \
             JOIN ledger_entries e ON e.transfer_id = t.id \
             WHERE t.merchant_id = $1 AND t.provider = $2 AND t.payment_id = $3 GROUP BY 1, 2",
            &[&MERCHANT, &provider, &payment],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let account: String = r.get(1);
            // The clearing account is named by the provider; the rest are the merchant's.
            ((r.get(0), account), r.get(2))
        })
        .collect();
    let transfers: i64 = db
        .query_one(
            "SELECT count(*) FROM ledger_transfers WHERE merchant_id = $1 AND provider = $2 AND payment_id = $3",
            &[&MERCHANT, &provider, &payment],
        )
        .await
        .unwrap()
        .get(0);
    let row = db
        .query_one(
            "SELECT status, refunded_minor, disputed_minor FROM payments \
             WHERE merchant_id = $1 AND provider = $2 AND payment_id = $3",
            &[&MERCHANT, &provider, &payment],
        )
        .await
        .unwrap();
    let order: String = db
        .query_one("SELECT status FROM orders WHERE id = $1", &[&order_id])
        .await
        .unwrap()
        .get(0);
    let disputes = db
        .query(
            "SELECT funds, outcome, withdrawn_minor, fee_minor, reinstated_minor FROM payment_disputes \
             WHERE merchant_id = $1 AND provider = $2 AND payment_id = $3 \
             ORDER BY withdrawn_minor, reinstated_minor, outcome, fee_minor",
            &[&MERCHANT, &provider, &payment],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    Books {
        entries,
        transfers,
        payment: (row.get(0), row.get(1), row.get(2)),
        order,
        disputes,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_of_a_payments_refund_and_dispute_events_ends_in_the_same_books_and_statuses() {
    let app = spawn_app().await;
    let mut rng = StdRng::seed_from_u64(37);
    for case in 0..10 {
        let scenario = Scenario::generate(&mut rng);
        let steps = scenario.steps();
        let orders = orders(steps.len(), 40, &mut rng);
        let results: Vec<(Vec<usize>, Books)> =
            futures_util::stream::iter(orders.iter().enumerate())
                .map(|(n, order)| {
                    let (app, scenario, steps) = (&app, &scenario, &steps);
                    async move {
                        let tag = format!("c{case}o{n}");
                        let order_id = app.create_order(MERCHANT, scenario.captured, "USD").await;
                        let events: Vec<(String, String)> = order
                            .iter()
                            .map(|&i| canonical(scenario, &tag, order_id, steps[i]))
                            .collect();
                        deliver_in_order(app, ACME, &events).await;
                        let books = books_of(app, ACME, &format!("pay_{tag}"), order_id).await;
                        (order.clone(), books)
                    }
                })
                .buffer_unordered(8)
                .collect()
                .await;
        let (first_order, first) = &results[0];
        for (order, books) in &results[1..] {
            assert_eq!(
                books,
                first,
                "case {case}, {scenario:?}: the events in order {order:?} ({:?}) end apart from \
                 order {first_order:?} ({:?})",
                order.iter().map(|&i| steps[i]).collect::<Vec<_>>(),
                first_order.iter().map(|&i| steps[i]).collect::<Vec<_>>(),
            );
        }
        // And the books are what the provider moved: each account's total.
        let total = |account: &str| -> i64 {
            first
                .entries
                .iter()
                .filter(|((_, a), _)| a == account)
                .map(|(_, v)| v)
                .sum()
        };
        let refunded: i64 = scenario.refunds.iter().sum();
        let withdrawn: i64 = scenario.disputes.iter().map(|d| d.withdrawn).sum();
        let fees: i64 = scenario.disputes.iter().map(|d| d.fee).sum();
        let reinstated: i64 = scenario.disputes.iter().filter_map(|d| d.reinstated).sum();
        assert_eq!(
            total("psp_clearing:acme"),
            scenario.captured - refunded - withdrawn - fees + reinstated,
            "case {case}: {scenario:?} {first:?}"
        );
        assert_eq!(total("dispute_fees"), fees, "case {case}");
        assert_eq!(
            first.payment.1, refunded,
            "case {case}: every refund is booked"
        );
    }
}

/// Paddle's chargeback, its reversal and a second chargeback of one transaction (each its own
/// adjustment; the reversal names no chargeback) are two withdrawals and one reinstatement in
/// every order of arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paddles_chargeback_reversal_and_chargeback_again_are_two_withdrawals_in_every_order() {
    let app = spawn_app_with(&all_providers("")).await;
    let mut rng = StdRng::seed_from_u64(1);
    let mut results = Vec::new();
    for (n, order) in orders(4, 24, &mut rng).into_iter().enumerate() {
        let order_id = app.create_order(MERCHANT, 5000, "USD").await;
        let payment = format!("txn_{n}");
        let events = [
            payload(
                PADDLE,
                &format!("{n}_cap"),
                &payment,
                &Kind::Capture {
                    order: Some(order_id),
                    amount: 5000,
                    currency: "USD",
                },
            ),
            payload(
                PADDLE,
                &format!("{n}_cb1"),
                &payment,
                &Kind::Withdrawal {
                    dispute_id: format!("adj_{n}_1"),
                    amount: 5000,
                    fee: 1500,
                    currency: "USD",
                },
            ),
            payload(
                PADDLE,
                &format!("{n}_rev"),
                &payment,
                &Kind::Reinstatement {
                    dispute_id: String::new(),
                    amount: 5000,
                    currency: "USD",
                },
            ),
            payload(
                PADDLE,
                &format!("{n}_cb2"),
                &payment,
                &Kind::Withdrawal {
                    dispute_id: format!("adj_{n}_3"),
                    amount: 5000,
                    fee: 1500,
                    currency: "USD",
                },
            ),
        ];
        let arrival: Vec<(String, String)> = order
            .iter()
            .map(|&i| (events[i].event_id.clone(), events[i].body.clone()))
            .collect();
        deliver_in_order(&app, PADDLE, &arrival).await;
        // The same reversal reported again under another event id gives nothing back twice.
        let again = (
            format!("{}_again", events[2].event_id),
            events[2].body.replace(
                &events[2].event_id,
                &format!("{}_again", events[2].event_id),
            ),
        );
        assert!(post(&app, PADDLE, &again).await);
        results.push((order, books_of(&app, PADDLE, &payment, order_id).await));
    }
    let (_, first) = &results[0];
    for (order, books) in &results {
        assert_eq!(books, first, "order {order:?}");
    }
    assert_eq!(
        first.transfers, 4,
        "one capture, two chargebacks and one reversal: {first:?}"
    );
    assert_eq!(
        first.entries[&("chargeback".to_owned(), "psp_clearing:paddle".to_owned())],
        -13_000
    );
    assert_eq!(
        first.entries[&(
            "chargeback_reversal".to_owned(),
            "psp_clearing:paddle".to_owned()
        )],
        5_000
    );
    assert_eq!(first.payment.0, "disputed");
    assert_eq!(first.order, "disputed");
}
