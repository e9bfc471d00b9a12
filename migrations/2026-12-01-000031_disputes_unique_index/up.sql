-- A dispute's withdrawal and its reinstatement each post at most once per (merchant, provider,
-- dispute id), whatever event carries them: the database refuses a second one, as it refuses a
-- second transfer of an event id or a refund id. Partial, so captures (no dispute id) add no
-- index entry. Built CONCURRENTLY (captures insert transfers all the time), before any routine
-- can write a dispute transfer (000032). No IF NOT EXISTS: a failed build leaves an INVALID
-- index, and the next run should stop on it rather than skip it.
CREATE UNIQUE INDEX CONCURRENTLY uq_ledger_transfers_dispute
    ON ledger_transfers (merchant_id, provider, dispute_id, kind) WHERE dispute_id IS NOT NULL;
