//! The oracle, at quiescence (every webhook acknowledged or given up on): the books of each
//! payment equal what the provider holds, or the difference is held in front of finance with
//! the reason the model expects; nothing is missing or doubled; every redelivery in one
//! lifetime of its idempotency record got the byte-identical answer; every transfer balances
//! in its currency; captured money that does not fit its order is never applied to it.

use std::collections::HashMap;

use crate::case::{Case, OrderSpec};
use crate::models::{Expected, Model};
use crate::runner::{Ack, ack_groups};
use crate::support::MERCHANT;
use crate::truth::Payment;
use crate::world::World;

/// What the ledger holds for one payment, in the same parts as [`Expected`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Books {
    pub captured: i64,
    pub refunded: i64,
    pub withdrawn: i64,
    pub reinstated: i64,
    pub fees: i64,
    /// The capture's merchant-side account, and how many payment transfers there are.
    pub capture_accounts: Vec<String>,
    /// The provider's fees a settlement booked (`psp_fees:<provider>`).
    pub settled_fees: i64,
    /// For a payout's id: what it moved to the bank, and its payout and reversal transfers.
    pub bank: i64,
    pub payout_transfers: i64,
    pub payout_reversals: i64,
}

pub async fn books(world: &World, provider: &str, payment_id: &str) -> anyhow::Result<Books> {
    let rows = world
        .db
        .query(
            "SELECT t.kind, e.account, sum(e.amount_minor)::bigint, count(*) \
             FROM ledger_transfers t JOIN ledger_entries e ON e.transfer_id = t.id \
             WHERE t.merchant_id = $1 AND t.provider = $2 AND t.payment_id = $3 \
             GROUP BY 1, 2",
            &[&MERCHANT, &provider, &payment_id],
        )
        .await?;
    let clearing = format!("psp_clearing:{provider}");
    let fees = format!("psp_fees:{provider}");
    let bank = format!("bank:{provider}:");
    let mut books = Books::default();
    for row in rows {
        let (kind, account, sum, count): (String, String, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let merchant_side = account == "merchant_payable" || account == "unapplied_funds";
        match (kind.as_str(), account.as_str()) {
            ("payment", a) if a == clearing => books.captured += sum,
            ("payment", a) if merchant_side => books.capture_accounts.push(a.to_owned()),
            ("refund", a) if a == clearing => books.refunded -= sum,
            // Money a provider gave back after a refund it had reported.
            ("refund_reversal", a) if a == clearing => books.refunded -= sum,
            ("chargeback", _) if merchant_side => books.withdrawn += sum,
            ("chargeback", "dispute_fees") => books.fees += sum,
            ("chargeback_reversal", a) if a == clearing => books.reinstated += sum,
            ("fee", a) if a == fees => books.settled_fees += sum,
            ("payout", a) if a.starts_with(&bank) => {
                books.bank += sum;
                books.payout_transfers += count;
            }
            ("payout_reversal", a) if a.starts_with(&bank) => {
                books.bank += sum;
                books.payout_reversals += count;
            }
            _ => {}
        }
    }
    Ok(books)
}

/// Every violation of the history whose payments are `payments` and answers `acks`.
pub async fn check(
    world: &World,
    model: &dyn Model,
    payments: &[Payment],
    acks: &[Ack],
    case: &Case,
    settled: bool,
) -> anyhow::Result<Vec<String>> {
    let provider = model.provider();
    let mut violations = Vec::new();
    let mut payable_by_order: HashMap<i64, usize> = HashMap::new();
    for payment in payments {
        let expected = model.expect(payment);
        let books = books(world, provider, &payment.id).await?;
        let mut differences = Vec::new();
        let mut compare = |part: &str, booked: i64, truth: i64| {
            if booked != truth {
                differences.push(format!("{part} {booked} where the provider holds {truth}"));
            }
        };
        compare("captured", books.captured, expected.captured);
        compare("refunded", books.refunded, expected.refunded);
        compare("withdrawn", books.withdrawn, expected.withdrawn);
        compare("reinstated", books.reinstated, expected.reinstated);
        if let Some(fees) = expected.fees {
            compare("fees", books.fees, fees);
        }
        if settled {
            compare(
                "fees settled",
                books.settled_fees,
                payment.processing_fees(),
            );
        }
        if books.capture_accounts.len() > 1 {
            differences.push(format!(
                "{} payment transfers (one payment moves money once)",
                books.capture_accounts.len()
            ));
        }
        for payout in &payment.payouts {
            let paid = self::books(world, provider, &payout.id).await?;
            let truth = if payout.failed { 0 } else { payout.amount };
            if paid.bank != truth || paid.payout_transfers > 1 || paid.payout_reversals > 1 {
                differences.push(format!(
                    "payout {} ({} {}, failed {}): {} in the bank by {} payout and {} reversal \
                     transfers",
                    payout.id,
                    payout.amount,
                    payment.currency,
                    payout.failed,
                    paid.bank,
                    paid.payout_transfers,
                    paid.payout_reversals
                ));
            }
        }
        if !differences.is_empty() {
            violations.push(format!(
                "payment {} ({}): the books hold {}",
                payment.id,
                describe(payment),
                differences.join(", ")
            ));
        }
        for gap in &expected.gaps {
            // What `/admin/attention` lists for the payment's disputes (all of them, not only
            // the newest page the API answers).
            let reasons: Vec<String> = world
                .db
                .query(
                    "SELECT CASE WHEN note IS NOT NULL THEN note \
                                 WHEN outcome = 'won' THEN 'won_not_reinstated' \
                                 WHEN outcome = 'open' THEN 'open' END \
                     FROM payment_disputes WHERE merchant_id = $1 AND provider = $2 \
                     AND payment_id = $3 AND (outcome = 'open' OR note IS NOT NULL \
                         OR (outcome = 'won' AND reinstated_minor < withdrawn_minor))",
                    &[&MERCHANT, &provider, &payment.id],
                )
                .await?
                .iter()
                .filter_map(|row| row.get::<_, Option<String>>(0))
                .collect();
            // Listed with the reason the model expects, or with a note that comes first in
            // attention (`exceeds_remaining`: later refunds, booked, took what the provider
            // had given back): either way in front of finance.
            if !reasons
                .iter()
                .any(|r| r == gap.reason || r == "exceeds_remaining")
            {
                violations.push(format!(
                    "payment {}: {} {} the gateway cannot book is not in attention with {:?}",
                    payment.id, gap.part, gap.amount, gap.reason
                ));
            }
        }
        let spec = &case.payments[payment.index];
        if books
            .capture_accounts
            .iter()
            .any(|a| a == "merchant_payable")
        {
            if matches!(spec.order, OrderSpec::OtherAmount | OrderSpec::None)
                || payment.captured != payment.amount
            {
                violations.push(format!(
                    "payment {} was applied to an order it does not fit ({:?}, captured {} of {})",
                    payment.id, spec.order, payment.captured, payment.amount
                ));
            }
            if let Some(order) = payment.order {
                *payable_by_order.entry(order).or_default() += 1;
            }
        }
    }
    for (order, count) in payable_by_order {
        if count > 1 {
            violations.push(format!("order {order} was paid by {count} payments"));
        }
    }
    // Every transfer of these payments balances in its currency.
    let ids: Vec<String> = payments.iter().map(|p| p.id.clone()).collect();
    let unbalanced: i64 = world
        .db
        .query_one(
            "SELECT count(*) FROM (SELECT t.id FROM ledger_transfers t \
             JOIN ledger_entries e ON e.transfer_id = t.id \
             WHERE t.merchant_id = $1 AND t.provider = $2 AND t.payment_id = ANY($3) \
             GROUP BY t.id, e.currency HAVING sum(e.amount_minor) <> 0) x",
            &[&MERCHANT, &provider, &ids],
        )
        .await?
        .get(0);
    if unbalanced > 0 {
        violations.push(format!(
            "{unbalanced} transfers do not balance in their currency"
        ));
    }
    // Paid out and settled (`Runner::pay_out_and_settle`): every payment's balance went to the
    // bank, so what clearing holds for it and its payouts is nothing, in every currency.
    if settled {
        let mut ids = ids.clone();
        ids.extend(
            payments
                .iter()
                .flat_map(|p| p.payouts.iter().map(|po| po.id.clone())),
        );
        let left = world
            .db
            .query(
                "SELECT e.currency, sum(e.amount_minor)::bigint FROM ledger_transfers t \
                 JOIN ledger_entries e ON e.transfer_id = t.id \
                 WHERE t.merchant_id = $1 AND t.provider = $2 AND t.payment_id = ANY($3) \
                   AND e.account = $4 \
                 GROUP BY 1 HAVING sum(e.amount_minor) <> 0",
                &[
                    &MERCHANT,
                    &provider,
                    &ids,
                    &format!("psp_clearing:{provider}"),
                ],
            )
            .await?;
        for row in left {
            let (currency, amount): (String, i64) = (row.get(0), row.get(1));
            violations.push(format!(
                "every balance was paid out and settled, yet clearing holds {amount} {currency} \
                 for the history's payments"
            ));
        }
    }
    violations.extend(fanned_out(world, &ids).await?);
    for ((event, epoch), group) in ack_groups(acks) {
        let first = group[0];
        if let Some(other) = group
            .iter()
            .find(|a| a.body != first.body || a.status != first.status)
        {
            violations.push(format!(
                "{event} was answered differently in one lifetime of its record ({epoch}): \
                 {} {} and then {} {}",
                first.status, first.body, other.status, other.body
            ));
        }
    }
    Ok(violations)
}

fn describe(p: &Payment) -> String {
    let expected: Expected = Expected {
        captured: p.captured,
        ..Expected::default()
    };
    let refunds: Vec<String> = p
        .refunds
        .iter()
        .map(|r| format!("{} {:?}", r.amount, r.state))
        .collect();
    let chargebacks: Vec<String> = p
        .chargebacks
        .iter()
        .map(|c| format!("{}+{} {:?}", c.amount, c.fee, c.state))
        .collect();
    format!(
        "{:?}, captured {} {}, refunds [{}], chargebacks [{}]",
        p.status,
        expected.captured,
        p.currency,
        refunds.join(", "),
        chargebacks.join(", ")
    )
}

/// What a staged notification says, as two endpoints' copies of it must agree.
type Staged = (
    String,
    Option<i64>,
    Option<i64>,
    Option<String>,
    String,
    Option<String>,
);

/// Each of the merchant's endpoints made by API got exactly the notifications of the history's
/// payments its filter takes, and the file's endpoint none: the unfiltered endpoint's rows are
/// the reference (each change staged once per subscribed endpoint, in its transaction).
async fn fanned_out(world: &World, payment_ids: &[String]) -> anyhow::Result<Vec<String>> {
    let mut violations = Vec::new();
    if world.endpoints.is_empty() {
        return Ok(violations);
    }
    let rows = world
        .db
        .query(
            "SELECT endpoint_id, kind, order_id, transfer_id, event_id, object_status, dispute_id \
             FROM merchant_notifications WHERE merchant_id = $1 AND payment_id = ANY($2)",
            &[&MERCHANT, &payment_ids],
        )
        .await?;
    let mut by_endpoint: HashMap<String, Vec<Staged>> = HashMap::new();
    for row in rows {
        by_endpoint.entry(row.get(0)).or_default().push((
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
            row.get(6),
        ));
    }
    for list in by_endpoint.values_mut() {
        list.sort();
    }
    let Some((all, _)) = world.endpoints.iter().find(|(_, filter)| filter.is_empty()) else {
        return Ok(violations);
    };
    let every = by_endpoint.get(all).cloned().unwrap_or_default();
    for (id, filter) in &world.endpoints {
        let expected: Vec<Staged> = every
            .iter()
            .filter(|s| filter.is_empty() || filter.contains(&s.0))
            .cloned()
            .collect();
        let got = by_endpoint.remove(id).unwrap_or_default();
        if got != expected {
            violations.push(format!(
                "endpoint {id} (filter {filter:?}) was staged {got:?} where its filter takes \
                 {expected:?}"
            ));
        }
    }
    for (id, rows) in by_endpoint {
        violations.push(format!(
            "{} notifications staged for endpoint {id}, which is none of the merchant's: {rows:?}",
            rows.len()
        ));
    }
    Ok(violations)
}
