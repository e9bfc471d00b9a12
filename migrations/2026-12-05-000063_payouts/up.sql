-- Payouts in the books (issue 55): a provider's payout moves the money it holds for the
-- merchant (`psp_clearing:<provider>`) to the merchant's bank (`bank:<provider>:<currency>`),
-- and a payout that fails after it was paid moves it back. `payouts` holds each payout's state
-- so its events, in any order and any number of times, post at most one payout and one
-- reversal: `paid` was booked; `failed` either reversed a booked payout or arrived first and
-- booked nothing, so a late `paid` books nothing either.
CREATE TABLE payouts (
    merchant_id  BIGINT      NOT NULL,
    provider     TEXT        NOT NULL,
    payout_id    TEXT        NOT NULL,
    status       TEXT        NOT NULL CHECK (status IN ('paid', 'failed')),
    -- As the provider reports it: negative for a payout that debits the bank (a negative
    -- balance reclaimed). For `paid`, exactly what the books moved.
    amount_minor BIGINT      NOT NULL,
    currency     TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, provider, payout_id)
);

-- A payout's transfers carry the payout id where a payment's carry the payment id.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text,
                             'payout'::text, 'payout_reversal'::text])) NOT VALID;
ALTER TABLE ledger_transfers VALIDATE CONSTRAINT ledger_transfers_kind_check;

-- A payout event's writes, guarded by the state its plan read, in a subtransaction: the
-- payout's row moves from `p_status_from` (NULL: there is none yet) to `p_status_to`, and with
-- `p_kind` a balanced transfer of two entries posts under the event id (unique per merchant,
-- provider and event, as every transfer). 'state_changed' when the row was not as read,
-- 'already_posted' when the event id posted before; nothing is written then.
CREATE FUNCTION payout_apply(
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payout_id TEXT,
    p_status_from TEXT, p_status_to TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_kind TEXT, p_account_to TEXT, p_account_from TEXT,
    OUT result payment_apply_result, OUT transfer_id BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    v_count INT;
BEGIN
    BEGIN
        IF p_status_from IS NULL THEN
            INSERT INTO payouts (merchant_id, provider, payout_id, status, amount_minor, currency)
            VALUES (p_merchant_id, p_provider, p_payout_id, p_status_to, p_amount_minor, p_currency)
            ON CONFLICT DO NOTHING;
        ELSE
            UPDATE payouts SET status = p_status_to, updated_at = now()
            WHERE merchant_id = p_merchant_id AND provider = p_provider
              AND payout_id = p_payout_id AND status = p_status_from;
        END IF;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payout not in the planned state';
        END IF;
        IF p_kind IS NOT NULL THEN
            transfer_id := nextval('ledger_transfers_id_seq');
            INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
            VALUES (transfer_id, p_merchant_id, p_provider, p_event_id, p_kind, p_payout_id)
            ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            IF v_count <> 1 THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event already posted';
            END IF;
            INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
            VALUES (transfer_id, p_merchant_id, p_account_to, p_currency, p_amount_minor),
                   (transfer_id, p_merchant_id, p_account_from, p_currency, -p_amount_minor);
        END IF;
        result := 'applied';
    EXCEPTION
        WHEN SQLSTATE 'CGD01' THEN
            result := 'state_changed';
            transfer_id := NULL;
        WHEN SQLSTATE 'CGD02' THEN
            result := 'already_posted';
            transfer_id := NULL;
    END;
END
$$;
