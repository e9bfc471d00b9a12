-- Fails while a payment, order or transfer holds one of the dispute values: revert only a
-- database that has seen no dispute, or remove them first.
DROP TABLE payment_disputes;
ALTER TABLE ledger_transfers DROP COLUMN dispute_id;
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind IN ('payment', 'refund'));
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('pending_payment', 'paid', 'partially_refunded', 'refunded'));
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('pending', 'succeeded', 'failed', 'partially_refunded', 'refunded', 'held'));
ALTER TABLE payments DROP COLUMN disputed_minor;
