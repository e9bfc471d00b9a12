-- /admin/attention's disputes: a dispute closed won whose funds came back only in part is
-- listed too (the provider still holds the rest), not only one whose funds never came back.
-- Replaces idx_payment_disputes_attention (dropped by the next migration); built CONCURRENTLY
-- (hence metadata.toml: no transaction), as every dispute event writes the table.
CREATE INDEX CONCURRENTLY idx_payment_disputes_attention_v2
    ON payment_disputes (updated_at DESC, id DESC)
    WHERE outcome = 'open' OR note IS NOT NULL
       OR (outcome = 'won' AND reinstated_minor < withdrawn_minor);
