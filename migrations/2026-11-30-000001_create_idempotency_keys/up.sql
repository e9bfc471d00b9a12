-- The seed's table, unchanged: an idempotency key is not a dedup switch, a replay returns
-- the previous response exactly.
CREATE TABLE idempotency_keys (
    id              BIGSERIAL PRIMARY KEY,
    user_id         BIGINT      NOT NULL,
    op              TEXT        NOT NULL,       -- order.create / payment.callback
    idem_key        TEXT        NOT NULL,       -- the client's key
    request_hash    TEXT        NOT NULL,       -- SHA-256 of the raw body: same key, other body
    status          TEXT        NOT NULL DEFAULT 'processing',
    response_status INT,
    response_body   JSONB,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at      TIMESTAMPTZ NOT NULL        -- must outlast the longest retry window
);

-- Scope = user + op + key: a global unique key would let user A's key block user B's.
CREATE UNIQUE INDEX uq_idempotency ON idempotency_keys (user_id, op, idem_key);

-- Cleanup deletes expired rows in batches by this index.
CREATE INDEX idx_idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- Acquire, in the caller's transaction: INSERT .. ON CONFLICT DO NOTHING, then read the row.
-- A concurrent duplicate waits on the unique index for the first transaction; that wait is
-- bounded by the session's lock_timeout, and its expiry comes back as in_flight = true
-- instead of an error, so the caller can answer 409 without parsing error messages.
-- The read runs as its own statement, so it sees a row that the first request committed
-- while this one waited. If the row vanished in between (cleanup removed an expired one),
-- the insert is tried again.
CREATE FUNCTION idempotency_acquire(
    p_user_id BIGINT,
    p_op TEXT,
    p_idem_key TEXT,
    p_request_hash TEXT,
    p_expires_at TIMESTAMPTZ
) RETURNS TABLE (
    record_id BIGINT,
    acquired BOOLEAN,
    in_flight BOOLEAN,
    status TEXT,
    response_status INT,
    response_body TEXT,
    request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id BIGINT;
BEGIN
    FOR attempt IN 1..3 LOOP
        BEGIN
            INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, expires_at)
            VALUES (p_user_id, p_op, p_idem_key, p_request_hash, p_expires_at)
            ON CONFLICT (user_id, op, idem_key) DO NOTHING
            RETURNING id INTO v_id;
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT NULL::BIGINT, false, true, NULL::TEXT, NULL::INT, NULL::TEXT, NULL::TEXT;
            RETURN;
        END;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true, false, 'processing'::TEXT, NULL::INT, NULL::TEXT, p_request_hash;
            RETURN;
        END IF;
        RETURN QUERY
            SELECT k.id, false, false, k.status, k.response_status, k.response_body::TEXT, k.request_hash
            FROM idempotency_keys k
            WHERE k.user_id = p_user_id AND k.op = p_op AND k.idem_key = p_idem_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'idempotency record % % % vanished three times during acquire', p_user_id, p_op, p_idem_key;
END
$$;
