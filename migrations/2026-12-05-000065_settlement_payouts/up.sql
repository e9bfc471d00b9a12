-- What the last `settle` found for each payout (issue 55), for finance's `GET /admin/settlements`
-- and the console's settlements page: the payout's state, what its report lines add up to, what
-- the report states it paid, what the books paid out, its lines and how many of their items
-- differ (a few named), and whether the bank statement had it. Each run replaces its payouts'
-- rows; the ledger and the report stay the truth, this is their last comparison.
CREATE TABLE settlement_payouts (
    merchant_id     BIGINT      NOT NULL,
    provider        TEXT        NOT NULL,
    payout_id       TEXT        NOT NULL,
    state           TEXT        NOT NULL,
    currency        TEXT        NOT NULL,
    report_minor    NUMERIC     NOT NULL,
    stated_minor    NUMERIC,
    ledger_minor    NUMERIC,
    lines           BIGINT      NOT NULL,
    differing_items BIGINT      NOT NULL,
    -- Up to 20 of its items that differ: [{"kind","id","state","report_minor","ledger_minor"}].
    differences     JSONB       NOT NULL DEFAULT '[]',
    -- `matched`, `amount_mismatch` or `payout_not_in_bank` when the run had a bank statement.
    bank            TEXT,
    report_file     TEXT        NOT NULL,
    settled_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, provider, payout_id)
);

-- The newest first, as finance reads them.
CREATE INDEX idx_settlement_payouts_settled ON settlement_payouts (settled_at DESC, payout_id);
