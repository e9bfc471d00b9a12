-- The digest of a month of the event log as the database computes it, so a retention pass can
-- compare it with the digest its archive's manifest holds before it drops the month
-- (docs/history.md). Each row is hashed over its fields, in a fixed binary form the archive's
-- writer computes the same way from the rows it read: bigints and the receipt time (in
-- microseconds since the epoch) as 8 bytes big-endian, each text or bytea as its length (4
-- bytes) and its bytes, NULL as the length -1, the ack status as 1 byte present and 4 bytes.
-- The month's digest chains the rows' digests in id order: sha256(previous || row digest),
-- starting from the empty string.
CREATE FUNCTION callback_deliveries_field(b bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(int4send(length(b)) || b, '\xffffffff'::bytea) $$;

CREATE FUNCTION callback_deliveries_row_digest(
    p_id bigint, p_merchant_id bigint, p_provider text, p_event_id text, p_body bytea,
    p_received_at timestamptz, p_event_type text, p_outcome text, p_reason text,
    p_ack_status integer, p_transfer_id bigint, p_trace_id text) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT sha256(
            int8send(p_id) || int8send(p_merchant_id)
            || callback_deliveries_field(convert_to(p_provider, 'UTF8'))
            || callback_deliveries_field(convert_to(p_event_id, 'UTF8'))
            || callback_deliveries_field(p_body)
            || int8send((extract(epoch FROM p_received_at) * 1000000)::bigint)
            || callback_deliveries_field(convert_to(p_event_type, 'UTF8'))
            || callback_deliveries_field(convert_to(p_outcome, 'UTF8'))
            || callback_deliveries_field(convert_to(p_reason, 'UTF8'))
            || coalesce('\x01'::bytea || int4send(p_ack_status), '\x00'::bytea)
            || coalesce('\x01'::bytea || int8send(p_transfer_id), '\x00'::bytea)
            || callback_deliveries_field(convert_to(p_trace_id, 'UTF8')))
    $$;

CREATE FUNCTION callback_deliveries_digest_step(state bytea, row_digest bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT sha256(state || row_digest) $$;

CREATE AGGREGATE callback_deliveries_digest(bytea) (
    SFUNC = callback_deliveries_digest_step,
    STYPE = bytea,
    INITCOND = ''
);
