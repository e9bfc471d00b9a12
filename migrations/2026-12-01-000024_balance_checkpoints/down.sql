DROP TABLE ledger_checkpoint_state;
DROP TABLE ledger_balance_checkpoints;
