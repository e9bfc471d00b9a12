DROP AGGREGATE callback_deliveries_digest(bytea);
DROP FUNCTION callback_deliveries_digest_step(bytea, bytea);
DROP FUNCTION callback_deliveries_row_digest(bigint, bigint, text, text, bytea, timestamptz, text, text, text, integer, bigint, text);
DROP FUNCTION callback_deliveries_field(bytea);
