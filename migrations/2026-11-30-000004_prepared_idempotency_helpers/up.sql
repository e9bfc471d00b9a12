-- diesel never caches prepared UPDATE statements or raw SQL fragments, so PostgreSQL would
-- parse and plan them on every request. These helpers are called through the query builder
-- (SELECT f(..)), which diesel-async prepares once per connection.

-- The exact text a stored response is sent as (the first answer and every replay).
CREATE FUNCTION idempotency_response_text(body JSONB) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT body::TEXT $$;

-- Finish: write the final response into the claimed record and return its text.
CREATE FUNCTION idempotency_finish(
    p_record_id BIGINT,
    p_status TEXT,
    p_response_status INT,
    p_response_body JSONB
) RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_text TEXT;
BEGIN
    UPDATE idempotency_keys
    SET status = p_status, response_status = p_response_status, response_body = p_response_body
    WHERE id = p_record_id
    RETURNING response_body::TEXT INTO v_text;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency record % does not exist', p_record_id;
    END IF;
    RETURN v_text;
END
$$;
