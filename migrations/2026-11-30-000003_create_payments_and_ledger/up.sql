-- One row per provider payment: the payment state machine's current state.
CREATE TABLE payments (
    id             BIGSERIAL PRIMARY KEY,
    merchant_id    BIGINT      NOT NULL,
    provider       TEXT        NOT NULL,
    payment_id     TEXT        NOT NULL,
    order_id       BIGINT      NOT NULL,
    status         TEXT        NOT NULL
                   CHECK (status IN ('pending', 'succeeded', 'failed', 'partially_refunded', 'refunded')),
    amount_minor   BIGINT      NOT NULL CHECK (amount_minor >= 0),
    currency       TEXT        NOT NULL,
    refunded_minor BIGINT      NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0 AND refunded_minor <= amount_minor),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (merchant_id, provider, payment_id)
);

-- The ledger is append-only and double-entry. One transfer per applied event, unique per
-- (merchant, provider, event id) forever: even a redelivery that outlived its idempotency
-- record cannot post twice.
CREATE TABLE ledger_transfers (
    id          BIGSERIAL PRIMARY KEY,
    merchant_id BIGINT      NOT NULL,
    provider    TEXT        NOT NULL,
    event_id    TEXT        NOT NULL,
    kind        TEXT        NOT NULL CHECK (kind IN ('payment', 'refund')),
    order_id    BIGINT      NOT NULL,
    payment_id  TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_ledger_transfers_event UNIQUE (merchant_id, provider, event_id)
);

-- Entries of one transfer sum to zero per currency; amounts are signed integer minor units.
CREATE TABLE ledger_entries (
    id           BIGSERIAL PRIMARY KEY,
    transfer_id  BIGINT      NOT NULL REFERENCES ledger_transfers (id),
    merchant_id  BIGINT      NOT NULL,
    account      TEXT        NOT NULL,
    currency     TEXT        NOT NULL,
    amount_minor BIGINT      NOT NULL CHECK (amount_minor <> 0)
);
CREATE INDEX idx_ledger_entries_transfer_id ON ledger_entries (transfer_id);
CREATE INDEX idx_ledger_entries_merchant_account ON ledger_entries (merchant_id, account, currency);

-- Append-only: the database itself refuses to change or remove postings.
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END
$$;
CREATE TRIGGER ledger_transfers_append_only BEFORE UPDATE OR DELETE ON ledger_transfers
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- The raw verified body of each first delivery, so finance can export and replay it.
CREATE TABLE callback_deliveries (
    id          BIGSERIAL PRIMARY KEY,
    merchant_id BIGINT      NOT NULL,
    provider    TEXT        NOT NULL,
    event_id    TEXT        NOT NULL,
    body        BYTEA       NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_callback_deliveries_event UNIQUE (merchant_id, provider, event_id)
);
CREATE INDEX idx_callback_deliveries_export ON callback_deliveries (provider, received_at, id);
