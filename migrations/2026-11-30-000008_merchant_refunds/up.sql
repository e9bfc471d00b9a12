-- Merchant refunds (op `refund.create`): the seed's two-phase variant. The key is claimed and
-- committed as `processing` before the provider is called, under a lease: `locked_until` says
-- until when the holder may finish it, `lease_token` which attempt holds it. A new holder takes
-- an expired lease over with a compare-and-set; finishing is a compare-and-set on the token.
-- Both NULL on every record of the one-transaction operations (order.create, payment.callback).
ALTER TABLE idempotency_keys
    ADD COLUMN locked_until TIMESTAMPTZ NULL,
    ADD COLUMN lease_token TEXT NULL;

-- The recoverer's scan: processing records of one op whose lease expired (or was released).
-- Finished records are not in it, so it stays as small as the work in flight.
CREATE INDEX idx_idempotency_keys_leases ON idempotency_keys (op, locked_until)
    WHERE status = 'processing';

-- One merchant refund request. Status, mapped to `RefundStatus` in src/refunds/model.rs:
--   processing  phase 1 committed; the provider has not answered yet (or its answer was lost)
--   pending     the provider accepted it (provider_refund_id set); its webhook has not posted yet
--   succeeded   the provider's refund webhook posted the refund to the ledger (same transaction)
--   failed      the provider declined it; its amount is refundable again
-- processing and pending count against what is still refundable.
CREATE TABLE refund_requests (
    id                       BIGSERIAL PRIMARY KEY,
    merchant_id              BIGINT      NOT NULL,
    order_id                 BIGINT      NOT NULL REFERENCES orders (id),
    provider                 TEXT        NOT NULL,
    payment_id               TEXT        NOT NULL,
    amount_minor             BIGINT      NOT NULL CHECK (amount_minor > 0),
    currency                 TEXT        NOT NULL,
    reason                   TEXT        NULL,
    status                   TEXT        NOT NULL DEFAULT 'processing'
        CHECK (status IN ('processing', 'pending', 'succeeded', 'failed')),
    -- Fixed in phase 1 and sent on every attempt, so the provider refunds once however often
    -- the call is repeated (by a client retry or the recoverer after a crash).
    provider_idempotency_key TEXT        NOT NULL UNIQUE,
    provider_refund_id       TEXT        NULL,
    -- The provider's message when it declined.
    failure_message          TEXT        NULL,
    -- The idempotency record that answers for it; NULL once the cleaner removed a finished one.
    idempotency_record_id    BIGINT      NULL UNIQUE REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- What is in flight per order: phase 1 sums these under the order's row lock.
CREATE INDEX idx_refund_requests_in_flight ON refund_requests (order_id)
    WHERE status IN ('processing', 'pending');
-- A refund webhook finds its request by the provider's refund id...
CREATE UNIQUE INDEX uq_refund_requests_provider_refund
    ON refund_requests (merchant_id, provider, provider_refund_id)
    WHERE provider_refund_id IS NOT NULL;
-- ...or, for cumulative refunds without an id (Stripe), by its payment.
CREATE INDEX idx_refund_requests_payment ON refund_requests (merchant_id, provider, payment_id);
