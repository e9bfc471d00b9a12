DROP TRIGGER audit_log_chain ON audit_log;
DROP FUNCTION audit_log_chain_row();
ALTER TABLE audit_log ALTER COLUMN id SET DEFAULT nextval('audit_log_id_seq');
ALTER TABLE audit_log DROP COLUMN row_hash, DROP COLUMN prev_hash;
DROP TABLE audit_log_chain;
DROP FUNCTION audit_log_chain_refuse_change();
DROP FUNCTION audit_log_row_hash(text, bigint, timestamptz, text, text, text, text, text, text, jsonb);
DROP FUNCTION audit_log_hash_field(text);
