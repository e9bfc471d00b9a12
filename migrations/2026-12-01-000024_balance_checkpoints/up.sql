-- Balances from checkpoints (issue 27): GET /admin/merchants/{id}/balances summed every entry of
-- the merchant, a read that grew with the ledger. A background job (src/ledger/checkpoint.rs,
-- one gateway at a time) now records each merchant's balances as of a ledger position, and a
-- read adds only the entries after it. It is a cache: a merchant without a row here is summed
-- from the start, so deleting rows never changes an answer. Nothing on the callback path
-- writes here.

-- One row per merchant, all its (account, currency) balances together, so a deletion is
-- always of a whole, consistent checkpoint. `balances` maps "account\tcurrency" to the exact
-- sum (a decimal string: sums of BIGINT entries can exceed BIGINT) of every entry of the
-- merchant with id <= through_entry_id.
CREATE TABLE ledger_balance_checkpoints (
    merchant_id      BIGINT      PRIMARY KEY,
    through_entry_id BIGINT      NOT NULL CHECK (through_entry_id > 0),
    balances         JSONB       NOT NULL,
    taken_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The job's own state (one row). A position is usable only once no entry at or below it can
-- still commit: entries commit out of id order, so the job notes the highest visible id with
-- the transactions then writing ledger_entries (their virtual ids, from pg_locks), and finishes
-- the checkpoint on a later pass, once all of them have ended (docs/reconciliation.md,
-- "Balances"). pg_locks is this database's own view; a snapshot's xid horizon would also wait
-- for every other database's transactions.
CREATE TABLE ledger_checkpoint_state (
    singleton        BOOLEAN     PRIMARY KEY DEFAULT true CHECK (singleton),
    through_entry_id BIGINT      NOT NULL DEFAULT 0,
    pending_entry_id BIGINT      NULL,
    pending_writers  TEXT[]      NULL
);
INSERT INTO ledger_checkpoint_state DEFAULT VALUES;
