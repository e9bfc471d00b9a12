-- The CHECKs widened NOT VALID in 000030 are validated here, in a transaction of its own:
-- VALIDATE scans each table under SHARE UPDATE EXCLUSIVE, which lets captures and refunds
-- write meanwhile (000030's ACCESS EXCLUSIVE locks were held only for the catalog changes).
ALTER TABLE payments VALIDATE CONSTRAINT payments_status_check;
ALTER TABLE orders VALIDATE CONSTRAINT orders_status_check;
ALTER TABLE ledger_transfers VALIDATE CONSTRAINT ledger_transfers_kind_check;
