DROP TABLE callback_deliveries;
DROP TRIGGER ledger_entries_append_only ON ledger_entries;
DROP TRIGGER ledger_transfers_append_only ON ledger_transfers;
DROP TABLE ledger_entries;
DROP TABLE ledger_transfers;
DROP FUNCTION ledger_refuse_change();
DROP TABLE payments;
