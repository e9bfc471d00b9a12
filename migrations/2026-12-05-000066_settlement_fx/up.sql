-- Conversions from a provider's settlement report (issue 55): a line settled in another
-- currency than it was paid in (Adyen's gross and net currencies) moves its money out of
-- clearing in the first currency and back in the second, through `fx:<provider>`. One `fx`
-- transfer a line, balanced in each currency:
--   psp_clearing:<provider>  -from (from currency)   fx:<provider>  +from (from currency)
--   fx:<provider>            -to   (to currency)     psp_clearing:<provider>  +to (to currency)
-- so clearing holds the converted amount for the payout, and `fx:<provider>` the positions the
-- provider converted (their ratio is the rate it applied). The event id is
-- `settlement-fx:<the line's reference>`: booked once however often the report is settled.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text,
                             'payout'::text, 'payout_reversal'::text, 'fee'::text,
                             'fx'::text])) NOT VALID;
ALTER TABLE ledger_transfers VALIDATE CONSTRAINT ledger_transfers_kind_check;

-- Books the conversions of one batch of report lines, each once: returns the references booked
-- now. The arrays are parallel, one element a line; a reference repeated in the batch is booked
-- once.
CREATE FUNCTION settlement_fx_post(
    p_merchant_id BIGINT, p_provider TEXT, p_reference TEXT[], p_payment_id TEXT[],
    p_from_currency TEXT[], p_from_minor BIGINT[], p_to_currency TEXT[], p_to_minor BIGINT[]
) RETURNS SETOF TEXT LANGUAGE sql AS $$
    WITH conversions AS (
        SELECT DISTINCT ON (t.reference) 'settlement-fx:' || t.reference AS event_id,
               t.payment_id, t.from_currency, t.from_minor, t.to_currency, t.to_minor
        FROM unnest(p_reference, p_payment_id, p_from_currency, p_from_minor, p_to_currency,
                    p_to_minor)
             AS t(reference, payment_id, from_currency, from_minor, to_currency, to_minor)
        ORDER BY t.reference
    ), posted AS (
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
        SELECT nextval('ledger_transfers_id_seq'), p_merchant_id, p_provider, c.event_id, 'fx',
               c.payment_id
        FROM conversions c
        ON CONFLICT DO NOTHING
        RETURNING id, event_id
    ), entries AS (
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT p.id, p_merchant_id, e.account, e.currency, e.amount_minor
        FROM posted p
        JOIN conversions c ON c.event_id = p.event_id
        CROSS JOIN LATERAL (VALUES
            ('psp_clearing:' || p_provider, c.from_currency, -c.from_minor),
            ('fx:' || p_provider, c.from_currency, c.from_minor),
            ('fx:' || p_provider, c.to_currency, -c.to_minor),
            ('psp_clearing:' || p_provider, c.to_currency, c.to_minor))
             AS e(account, currency, amount_minor)
        -- A line whose gross became nothing after rounding (50 IDR is 0.00 EUR) moves its gross
        -- into fx and nothing back: a ledger entry is never zero.
        WHERE e.amount_minor <> 0
        RETURNING transfer_id
    )
    SELECT DISTINCT substr(p.event_id, length('settlement-fx:') + 1)
    FROM posted p JOIN entries e ON e.transfer_id = p.id;
$$;
