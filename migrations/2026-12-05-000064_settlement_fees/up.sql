-- Fees from a provider's settlement report (issue 55): `callback-gateway settle` books each fee
-- the ledger does not hold yet as a `fee` transfer, `psp_fees:<provider>` +fee and
-- `psp_clearing:<provider>` -fee (negative: a fee given back). Its event id is
-- `settlement:<the report line's reference>` (Stripe's balance transaction id), so the unique
-- (merchant, provider, event id) of every transfer books a report's fee once however often the
-- report is settled.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text,
                             'payout'::text, 'payout_reversal'::text, 'fee'::text])) NOT VALID;
ALTER TABLE ledger_transfers VALIDATE CONSTRAINT ledger_transfers_kind_check;

-- Books the fees of one batch of report lines, each once: returns the references booked now
-- (not those booked before). The arrays are parallel, one element a fee; a reference repeated in
-- the batch is booked once.
CREATE FUNCTION settlement_fees_post(
    p_merchant_id BIGINT, p_provider TEXT, p_reference TEXT[], p_payment_id TEXT[],
    p_currency TEXT[], p_fee_minor BIGINT[]
) RETURNS SETOF TEXT LANGUAGE sql AS $$
    WITH fees AS (
        SELECT DISTINCT ON (t.reference) 'settlement:' || t.reference AS event_id, t.payment_id,
               t.currency, t.fee_minor
        FROM unnest(p_reference, p_payment_id, p_currency, p_fee_minor)
             AS t(reference, payment_id, currency, fee_minor)
        ORDER BY t.reference
    ), posted AS (
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
        SELECT nextval('ledger_transfers_id_seq'), p_merchant_id, p_provider, f.event_id, 'fee',
               f.payment_id
        FROM fees f
        ON CONFLICT DO NOTHING
        RETURNING id, event_id
    ), entries AS (
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT p.id, p_merchant_id, e.account, t.currency, e.amount_minor
        FROM posted p
        JOIN fees t ON t.event_id = p.event_id
        CROSS JOIN LATERAL (VALUES ('psp_fees:' || p_provider, t.fee_minor),
                                   ('psp_clearing:' || p_provider, -t.fee_minor))
             AS e(account, amount_minor)
        RETURNING transfer_id
    )
    -- The entries are written whether or not this select reads them (a data-modifying CTE
    -- always runs); reading them ties the answer to what was written.
    SELECT DISTINCT substr(p.event_id, length('settlement:') + 1)
    FROM posted p JOIN entries e ON e.transfer_id = p.id;
$$;
