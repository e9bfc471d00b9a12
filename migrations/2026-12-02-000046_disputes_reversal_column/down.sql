ALTER TABLE payment_disputes DROP COLUMN reinstated_by;
