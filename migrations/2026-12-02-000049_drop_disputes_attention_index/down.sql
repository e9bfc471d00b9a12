CREATE INDEX CONCURRENTLY idx_payment_disputes_attention
    ON payment_disputes (updated_at DESC, id DESC)
    WHERE outcome = 'open' OR note IS NOT NULL OR (outcome = 'won' AND funds = 'withdrawn');
