DROP TABLE audit_log;
DROP FUNCTION audit_log_refuse_change();
DROP TABLE operators;
