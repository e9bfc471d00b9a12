-- Disputes and chargebacks (docs/disputes.md): money a provider takes back from the merchant,
-- and the fee it charges for it, posted in the ledger like any other movement.
--
-- Every statement here is quick on a large database: the columns are nullable or have a
-- constant default (no rewrite), and the widened CHECKs are added NOT VALID (no scan while the
-- table is locked); migration 000033 validates them under a lock that lets writes through.

-- What disputes currently hold back of a payment: withdrawn minus reinstated. What may still
-- be refunded is amount_minor - refunded_minor - disputed_minor. A withdrawal is posted even
-- when it is larger than what remains (the provider moved it), so there is no CHECK tying it
-- to the other amounts; the planner's checked arithmetic and the writer's guards keep it.
ALTER TABLE payments ADD COLUMN disputed_minor BIGINT NOT NULL DEFAULT 0;

-- A payment is 'disputed' while funds are withdrawn and 'charged_back' once its dispute closes
-- lost; its order follows (a held payment stays 'held', and no order changes for it).
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('pending', 'succeeded', 'failed', 'partially_refunded', 'refunded', 'held',
                      'disputed', 'charged_back')) NOT VALID;
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('pending_payment', 'paid', 'partially_refunded', 'refunded',
                      'disputed', 'charged_back')) NOT VALID;

-- A withdrawal posts one 'chargeback' transfer (three entries when there is a fee), a
-- reinstatement one 'chargeback_reversal'. Each at most once per (merchant, provider, dispute
-- id), whatever event carries it: the unique index of migration 000031.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind IN ('payment', 'refund', 'chargeback', 'chargeback_reversal')) NOT VALID;
ALTER TABLE ledger_transfers ADD COLUMN dispute_id TEXT;

-- One row per dispute the provider reported: where its funds are and how it ended. Its one
-- writer is payment_disputes_write (migration 000032), called in the transaction that posts
-- the dispute's transfers and moves its payment and order.
CREATE TABLE payment_disputes (
    id               BIGSERIAL   PRIMARY KEY,
    merchant_id      BIGINT      NOT NULL,
    provider         TEXT        NOT NULL,
    dispute_id       TEXT        NOT NULL,
    payment_id       TEXT        NOT NULL,
    -- The order its payment is applied to (NULL for a held payment).
    order_id         BIGINT,
    -- none: no funds event yet (it closed first); withdrawn; reinstated.
    funds            TEXT        NOT NULL CHECK (funds IN ('none', 'withdrawn', 'reinstated')),
    outcome          TEXT        NOT NULL CHECK (outcome IN ('open', 'won', 'lost')),
    currency         TEXT        NOT NULL,
    -- The amounts posted: withdrawn (without the fee), the fee, reinstated.
    withdrawn_minor  BIGINT      NOT NULL DEFAULT 0 CHECK (withdrawn_minor >= 0),
    fee_minor        BIGINT      NOT NULL DEFAULT 0 CHECK (fee_minor >= 0),
    reinstated_minor BIGINT      NOT NULL DEFAULT 0 CHECK (reinstated_minor >= 0 AND reinstated_minor <= withdrawn_minor),
    -- The merchant account its withdrawal was posted against, and its reinstatement goes back to.
    account          TEXT        CHECK (account IN ('merchant_payable', 'unapplied_funds')),
    -- Why finance must look at it even after it closes: the withdrawal was larger than what
    -- remained of the payment, or its fee was charged in another currency and is not booked.
    note             TEXT        CHECK (note IN ('exceeds_remaining', 'fee_not_booked')),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_payment_disputes UNIQUE (merchant_id, provider, dispute_id)
);
-- The disputes of one payment (an event's detail, the console).
CREATE INDEX idx_payment_disputes_payment ON payment_disputes (merchant_id, provider, payment_id);
-- /admin/attention: newest first, only the disputes finance must look at (the predicate is
-- repeated verbatim by src/payments/dispute.rs, so the planner can use the index).
CREATE INDEX idx_payment_disputes_attention ON payment_disputes (updated_at DESC, id DESC)
    WHERE outcome = 'open' OR note IS NOT NULL OR (outcome = 'won' AND funds = 'withdrawn');
