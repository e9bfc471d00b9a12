-- One reversal gives back one chargeback: the database refuses a second dispute reinstated by
-- the same reversal id, as it refuses a second reversal transfer of a dispute. Built
-- CONCURRENTLY (hence metadata.toml: no transaction) before any routine can write the column
-- (migration 000050).
CREATE UNIQUE INDEX CONCURRENTLY uq_payment_disputes_reinstated_by
    ON payment_disputes (merchant_id, provider, reinstated_by) WHERE reinstated_by IS NOT NULL;
