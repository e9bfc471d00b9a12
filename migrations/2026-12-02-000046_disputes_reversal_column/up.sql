-- A reversal that names no dispute (Paddle's `chargeback_reverse` adjustment names only its
-- transaction) gives back one of its payment's withdrawn chargebacks; the planner picks which
-- and records the reversal's own id here, so the same reversal reported again (under another
-- event id) finds it and posts nothing. NULL for reinstatements that name their dispute. A
-- nullable column without a default: no rewrite of the table.
ALTER TABLE payment_disputes ADD COLUMN reinstated_by TEXT;
