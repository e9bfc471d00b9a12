--
-- PostgreSQL database dump
--

--
-- Name: first_delivery_result; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.first_delivery_result AS ENUM (
    'finished',
    'existing',
    'in_flight',
    'declined'
);

--
-- Name: payment_apply_result; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.payment_apply_result AS ENUM (
    'applied',
    'state_changed',
    'already_posted'
);

--
-- Name: audit_log_chain_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.audit_log_chain_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the audit log chain''s head moves only with an audit row: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

--
-- Name: audit_log_chain_row(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.audit_log_chain_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_prev text;
BEGIN
    SELECT last_hash INTO STRICT v_prev FROM audit_log_chain WHERE only_row FOR UPDATE;
    NEW.id := nextval('audit_log_id_seq');
    NEW.prev_hash := v_prev;
    NEW.row_hash := audit_log_row_hash(v_prev, NEW.id, NEW.at, NEW.actor, NEW.role, NEW.action,
                                       NEW.target, NEW.request_id, NEW.outcome, NEW.changes);
    UPDATE audit_log_chain SET last_id = NEW.id, last_hash = NEW.row_hash WHERE only_row;
    RETURN NEW;
END
$$;

--
-- Name: audit_log_hash_field(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.audit_log_hash_field(p_value text) RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(octet_length(convert_to(p_value, 'UTF8'))::text || ':' || p_value, '-') || E'\n' $$;

--
-- Name: audit_log_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.audit_log_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

--
-- Name: audit_log_row_hash(text, bigint, timestamp with time zone, text, text, text, text, text, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.audit_log_row_hash(p_prev_hash text, p_id bigint, p_at timestamp with time zone, p_actor text, p_role text, p_action text, p_target text, p_request_id text, p_outcome text, p_changes jsonb) RETURNS text
    LANGUAGE sql STABLE
    AS $$
SELECT encode(sha256(convert_to(
    p_prev_hash || E'\n' || p_id::text || E'\n'
    || ((extract(epoch FROM p_at) * 1000000)::bigint)::text || E'\n'
    || audit_log_hash_field(p_actor) || audit_log_hash_field(p_role)
    || audit_log_hash_field(p_action) || audit_log_hash_field(p_target)
    || audit_log_hash_field(p_request_id) || audit_log_hash_field(p_outcome)
    || audit_log_hash_field(p_changes::text), 'UTF8')), 'hex')
$$;

--
-- Name: callback_deliveries_add_ahead(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_add_ahead(p_months integer) RETURNS SETOF text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_month timestamptz;
    v_name text;
BEGIN
    FOR v_month IN
        SELECT m FROM generate_series(callback_deliveries_month_start(now()),
                                      callback_deliveries_month_start(now()) + make_interval(months => p_months),
                                      interval '1 month') m
        WHERE NOT EXISTS (
            SELECT 1
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                 LATERAL (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
                                 (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi) b
            WHERE i.inhparent = 'callback_deliveries'::regclass
              AND (b.lo IS NULL OR b.lo <= m) AND b.hi > m)
    LOOP
        v_name := callback_deliveries_add_month(v_month);
        IF v_name IS NOT NULL THEN
            RETURN NEXT v_name;
        END IF;
    END LOOP;
END
$$;

--
-- Name: callback_deliveries_add_month(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_add_month(p_month timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_from timestamptz := callback_deliveries_month_start(p_month);
    v_to timestamptz := callback_deliveries_month_start(p_month) + interval '1 month';
    v_name text := 'callback_deliveries_' || to_char(v_from AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
BEGIN
    IF to_regclass(v_name) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE callback_deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id), '
                   'ADD CONSTRAINT %I UNIQUE (merchant_id, provider, event_id), '
                   'ADD CONSTRAINT %I CHECK (received_at >= %L AND received_at < %L)',
                   v_name, v_name || '_pkey', v_name || '_event_key', v_name || '_bound', v_from, v_to);
    EXECUTE format('ALTER TABLE callback_deliveries ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   v_name, v_from, v_to);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', v_name, v_name || '_bound');
    RETURN v_name;
END
$$;

--
-- Name: callback_deliveries_digest_step(bytea, bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_digest_step(state bytea, row_digest bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT sha256(state || row_digest) $$;

--
-- Name: callback_deliveries_field(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_field(b bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(int4send(length(b)) || b, '\xffffffff'::bytea) $$;

--
-- Name: callback_deliveries_month_start(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_month_start(p_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT date_trunc('month', p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

--
-- Name: callback_deliveries_row_digest(bigint, bigint, text, text, bytea, timestamp with time zone, text, text, text, integer, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_deliveries_row_digest(p_id bigint, p_merchant_id bigint, p_provider text, p_event_id text, p_body bytea, p_received_at timestamp with time zone, p_event_type text, p_outcome text, p_reason text, p_ack_status integer, p_transfer_id bigint, p_trace_id text) RETURNS bytea
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

--
-- Name: callback_first_delivery(text, text, text, timestamp with time zone, bytea, bigint, text, text, text, bigint, text, text, text, bigint, text, bigint, bigint, text, text, text, bigint, text, bigint, text, text, text, text, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_first_delivery(p_op text, p_idem_key text, p_request_hash text, p_expires_at timestamp with time zone, p_body bytea, p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_ack text, p_event_type text, p_outcome text, p_reason text, p_notify boolean DEFAULT false, p_trace_id text DEFAULT NULL::text, OUT result public.first_delivery_result, OUT status text, OUT response_status integer, OUT response_body text, OUT request_hash text) RETURNS record
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_record_id BIGINT;
    v_transfer_id BIGINT;
    v_ack JSONB;
    v_recorded BOOLEAN;
    v_claimed BOOLEAN := false;
BEGIN
    -- The block is a subtransaction: 'declined' rolls back every write below.
    BEGIN
        -- The transfer id is drawn first so the record can be claimed finished, its ack holding
        -- the id, in one write.
        IF p_kind IS NOT NULL THEN
            v_transfer_id := nextval('ledger_transfers_id_seq');
            v_ack := p_ack::JSONB || jsonb_build_object('transfer_id', v_transfer_id);
        ELSE
            v_ack := p_ack::JSONB;
        END IF;
        v_record_id := idempotency_claim(p_merchant_id, p_op, p_idem_key, p_request_hash, p_expires_at,
                                         'succeeded', 200, v_ack);
        v_claimed := true;
        IF v_record_id IS NULL THEN
            -- A concurrent delivery committed the key after the caller's read.
            SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
            INTO result, status, response_status, response_body, request_hash
            FROM idempotency_record(p_merchant_id, p_op, p_idem_key) r;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'record vanished during claim';
            END IF;
            RETURN;
        END IF;
        -- Assignments, not PERFORM: plpgsql evaluates a lone function call as a simple
        -- expression, without starting an executor for a query.
        v_recorded := callback_record_delivery(p_merchant_id, p_provider, p_event_id, p_body,
            p_event_type, p_outcome, p_reason, 200, v_transfer_id, p_trace_id);
        v_transfer_id := payment_apply_strict(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_payment_id,
            p_order_id, p_order_from, p_order_to, p_payment_status, p_amount_minor, p_currency,
            p_refunded_from, p_refunded_to, p_kind, p_refund_id,
            p_account_a, p_amount_a, p_account_b, p_amount_b, p_notify, p_reason);
    EXCEPTION
        WHEN SQLSTATE 'CGD01' OR SQLSTATE 'CGD02' OR deadlock_detected THEN
            -- A deadlock can only be with a batch (below) that locks other orders first.
            result := 'declined';
            response_body := NULL;
            RETURN;
        WHEN lock_not_available THEN
            -- Waiting for the key means another delivery of this event is in flight; waiting
            -- for the order or the payment sends the event down the general path, which waits
            -- with the full timeout and decides from what it then finds.
            result := CASE WHEN v_claimed THEN 'declined' ELSE 'in_flight' END;
            response_body := NULL;
            RETURN;
    END;
    result := 'finished';
    status := 'succeeded';
    response_status := 200;
    response_body := v_ack::TEXT;
    request_hash := p_request_hash;
END
$$;

--
-- Name: callback_first_delivery_batch(text, text, text[], text[], timestamp with time zone[], bytea[], bigint[], text[], text[], text[], bigint[], text[], text[], text[], bigint[], text[], bigint[], bigint[], text[], text[], text[], bigint[], text[], bigint[], text[], text[], text[], text[], boolean[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_first_delivery_batch(p_op text, p_lock_timeout text, p_idem_key text[], p_request_hash text[], p_expires_at timestamp with time zone[], p_body bytea[], p_merchant_id bigint[], p_provider text[], p_event_id text[], p_payment_id text[], p_order_id bigint[], p_order_from text[], p_order_to text[], p_payment_status text[], p_amount_minor bigint[], p_currency text[], p_refunded_from bigint[], p_refunded_to bigint[], p_kind text[], p_refund_id text[], p_account_a text[], p_amount_a bigint[], p_account_b text[], p_amount_b bigint[], p_ack text[], p_event_type text[], p_outcome text[], p_reason text[], p_notify boolean[] DEFAULT NULL::boolean[], p_trace_id text[] DEFAULT NULL::text[]) RETURNS TABLE(item integer, result public.first_delivery_result, status text, response_status integer, response_body text, request_hash text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_item RECORD;
    v_new INT[] := '{}';
    v_n INT;
    v_i INT;
    v_independent BOOLEAN;
    v_written BOOLEAN := false;
    v_recorded INT;
    v_transfer_id BIGINT[];
    v_ack JSONB[];
    v_ack_status INT[];
    -- The new items' values, in the order of v_new.
    v_idem_key TEXT[]; v_request_hash TEXT[]; v_expires_at TIMESTAMPTZ[]; v_body BYTEA[];
    v_merchant_id BIGINT[]; v_provider TEXT[]; v_event_id TEXT[]; v_payment_id TEXT[];
    v_order_id BIGINT[]; v_order_from TEXT[]; v_order_to TEXT[];
    v_payment_status TEXT[]; v_amount_minor BIGINT[]; v_currency TEXT[];
    v_refunded_from BIGINT[]; v_refunded_to BIGINT[]; v_kind TEXT[]; v_refund_id TEXT[];
    v_account_a TEXT[]; v_amount_a BIGINT[]; v_account_b TEXT[]; v_amount_b BIGINT[];
    v_ack_text TEXT[]; v_event_type TEXT[]; v_outcome TEXT[]; v_reason TEXT[]; v_notify BOOLEAN[];
    v_trace_id TEXT[];
BEGIN
    -- Transaction-local: the session's own lock_timeout is back after this statement.
    PERFORM set_config('lock_timeout', p_lock_timeout, true);

    -- A key with a record is a redelivery: its answer is the record. One read per item: a
    -- lookup by the full key is cheap, and a join over the batch would leave the choice of index
    -- to statistics that lag behind a growing table.
    FOR v_i IN 1 .. coalesce(array_length(p_merchant_id, 1), 0) LOOP
        item := v_i;
        SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_record(p_merchant_id[v_i], p_op, p_idem_key[v_i]) r;
        IF FOUND THEN
            RETURN NEXT;
        ELSE
            v_new := v_new || v_i;
        END IF;
    END LOOP;
    v_n := cardinality(v_new);
    IF v_n = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(p_idem_key[i] ORDER BY n), array_agg(p_request_hash[i] ORDER BY n),
           array_agg(p_expires_at[i] ORDER BY n), array_agg(p_body[i] ORDER BY n),
           array_agg(p_merchant_id[i] ORDER BY n), array_agg(p_provider[i] ORDER BY n),
           array_agg(p_event_id[i] ORDER BY n), array_agg(p_payment_id[i] ORDER BY n),
           array_agg(p_order_id[i] ORDER BY n), array_agg(p_order_from[i] ORDER BY n),
           array_agg(p_order_to[i] ORDER BY n), array_agg(p_payment_status[i] ORDER BY n),
           array_agg(p_amount_minor[i] ORDER BY n), array_agg(p_currency[i] ORDER BY n),
           array_agg(p_refunded_from[i] ORDER BY n), array_agg(p_refunded_to[i] ORDER BY n),
           array_agg(p_kind[i] ORDER BY n), array_agg(p_refund_id[i] ORDER BY n),
           array_agg(p_account_a[i] ORDER BY n), array_agg(p_amount_a[i] ORDER BY n),
           array_agg(p_account_b[i] ORDER BY n), array_agg(p_amount_b[i] ORDER BY n),
           array_agg(p_ack[i] ORDER BY n), array_agg(p_event_type[i] ORDER BY n),
           array_agg(p_outcome[i] ORDER BY n), array_agg(p_reason[i] ORDER BY n),
           array_agg(p_notify[i] ORDER BY n), array_agg(p_trace_id[i] ORDER BY n),
           array_agg(CASE WHEN p_kind[i] IS NOT NULL THEN nextval('ledger_transfers_id_seq') END ORDER BY n),
           -- Independent items: written together, they write what they would one by one.
           count(DISTINCT (p_merchant_id[i], p_idem_key[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_event_id[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_payment_id[i])) = v_n
             AND count(DISTINCT p_order_id[i]) = count(p_order_id[i])
    INTO v_idem_key, v_request_hash, v_expires_at, v_body, v_merchant_id, v_provider, v_event_id,
         v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status, v_amount_minor,
         v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id, v_account_a, v_amount_a,
         v_account_b, v_amount_b, v_ack_text, v_event_type, v_outcome, v_reason, v_notify, v_trace_id,
         v_transfer_id, v_independent
    FROM unnest(v_new) WITH ORDINALITY AS t(i, n);

    IF v_independent THEN
        -- The transfer ids are drawn first so the records are claimed finished, each ack
        -- holding its id, in one write.
        v_ack := ARRAY(
            SELECT CASE WHEN t.id IS NULL THEN t.ack::JSONB
                        ELSE t.ack::JSONB || jsonb_build_object('transfer_id', t.id) END
            FROM unnest(v_ack_text, v_transfer_id) WITH ORDINALITY AS t(ack, id, n)
            ORDER BY t.n);
        v_ack_status := array_fill(200, ARRAY[v_n]);
        -- The block is a subtransaction: any failure undoes every item's writes, and the items
        -- run one by one below instead.
        BEGIN
            IF cardinality(idempotency_claim_all(v_merchant_id, p_op, v_idem_key, v_request_hash,
                    v_expires_at, 'succeeded', v_ack_status, v_ack)) <> v_n THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'a key was claimed meanwhile';
            END IF;
            -- Assignments, not PERFORM: plpgsql evaluates a lone call without starting a query.
            -- An event already recorded (its idempotency record expired) is not recorded again.
            v_recorded := callback_record_deliveries(v_merchant_id, v_provider, v_event_id, v_body,
                v_event_type, v_outcome, v_reason, v_ack_status, v_transfer_id, v_trace_id);
            v_transfer_id := payment_apply_all(v_transfer_id, v_merchant_id, v_provider, v_event_id,
                v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status,
                v_amount_minor, v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id,
                v_account_a, v_amount_a, v_account_b, v_amount_b,
                p_notify => v_notify, p_reason => v_reason);
            v_written := true;
        EXCEPTION
            WHEN SQLSTATE 'CGD01' OR SQLSTATE 'CGD02' OR lock_not_available OR deadlock_detected
                 OR cardinality_violation THEN
                v_written := false;
        END;
    END IF;

    IF v_written THEN
        FOR j IN 1 .. v_n LOOP
            item := v_new[j];
            result := 'finished';
            status := 'succeeded';
            response_status := 200;
            response_body := v_ack[j]::TEXT;
            request_hash := v_request_hash[j];
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    -- One by one, each in its own subtransaction, answered on its own.
    FOREACH v_i IN ARRAY v_new LOOP
        item := v_i;
        SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_record(p_merchant_id[v_i], p_op, p_idem_key[v_i]) r;
        IF NOT FOUND THEN
            v_item := callback_first_delivery(p_op, p_idem_key[v_i], p_request_hash[v_i], p_expires_at[v_i],
                p_body[v_i], p_merchant_id[v_i], p_provider[v_i], p_event_id[v_i], p_payment_id[v_i],
                p_order_id[v_i], p_order_from[v_i], p_order_to[v_i], p_payment_status[v_i],
                p_amount_minor[v_i], p_currency[v_i], p_refunded_from[v_i], p_refunded_to[v_i],
                p_kind[v_i], p_refund_id[v_i], p_account_a[v_i], p_amount_a[v_i], p_account_b[v_i],
                p_amount_b[v_i], p_ack[v_i], p_event_type[v_i], p_outcome[v_i], p_reason[v_i],
                coalesce(p_notify[v_i], false), p_trace_id[v_i]);
            result := v_item.result;
            status := v_item.status;
            response_status := v_item.response_status;
            response_body := v_item.response_body;
            request_hash := v_item.request_hash;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

--
-- Name: callback_record_deliveries(bigint[], text[], text[], bytea[], text[], text[], text[], integer[], bigint[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_record_deliveries(p_merchant_id bigint[], p_provider text[], p_event_id text[], p_body bytea[], p_event_type text[], p_outcome text[], p_reason text[], p_ack_status integer[], p_transfer_id bigint[], p_trace_id text[] DEFAULT NULL::text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO callback_deliveries
        (merchant_id, provider, event_id, body, event_type, outcome, reason, ack_status, transfer_id,
         trace_id)
    SELECT * FROM unnest(p_merchant_id, p_provider, p_event_id, p_body, p_event_type, p_outcome,
                         p_reason, p_ack_status, p_transfer_id,
                         -- unnest pads a shorter (or NULL) array with NULLs.
                         p_trace_id)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

--
-- Name: callback_record_delivery(bigint, text, text, bytea, text, text, text, integer, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_record_delivery(p_merchant_id bigint, p_provider text, p_event_id text, p_body bytea, p_event_type text, p_outcome text, p_reason text, p_ack_status integer, p_transfer_id bigint, p_trace_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN callback_record_deliveries(ARRAY[p_merchant_id], ARRAY[p_provider], ARRAY[p_event_id],
        ARRAY[p_body], ARRAY[p_event_type], ARRAY[p_outcome], ARRAY[p_reason], ARRAY[p_ack_status],
        ARRAY[p_transfer_id], ARRAY[p_trace_id]) = 1;
END
$$;

--
-- Name: idempotency_acquire(bigint, text, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_acquire(p_user_id bigint, p_op text, p_idem_key text, p_request_hash text, p_expires_at timestamp with time zone) RETURNS TABLE(record_id bigint, acquired boolean, in_flight boolean, status text, response_status integer, response_body text, request_hash text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_id BIGINT;
BEGIN
    FOR attempt IN 1..3 LOOP
        BEGIN
            v_id := idempotency_claim(p_user_id, p_op, p_idem_key, p_request_hash, p_expires_at);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT NULL::BIGINT, false, true, NULL::TEXT, NULL::INT, NULL::TEXT, NULL::TEXT;
            RETURN;
        END;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true, false, 'processing'::TEXT, NULL::INT, NULL::TEXT, p_request_hash;
            RETURN;
        END IF;
        -- The read is its own statement, so it sees a record committed while the claim waited.
        RETURN QUERY
            SELECT NULL::BIGINT, false, false, r.status, r.response_status, r.response_body, r.request_hash
            FROM idempotency_record(p_user_id, p_op, p_idem_key) r;
        IF FOUND THEN
            RETURN;
        END IF;
        -- The record vanished in between (the cleaner removed an expired one): claim again.
    END LOOP;
    RAISE EXCEPTION 'idempotency record % % % vanished three times during acquire', p_user_id, p_op, p_idem_key;
END
$$;

--
-- Name: idempotency_claim(bigint, text, text, text, timestamp with time zone, text, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_claim(p_user_id bigint, p_op text, p_idem_key text, p_request_hash text, p_expires_at timestamp with time zone, p_status text DEFAULT 'processing'::text, p_response_status integer DEFAULT NULL::integer, p_response_body jsonb DEFAULT NULL::jsonb) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN (idempotency_claim_all(ARRAY[p_user_id], p_op, ARRAY[p_idem_key], ARRAY[p_request_hash],
        ARRAY[p_expires_at], p_status, ARRAY[p_response_status], ARRAY[p_response_body]))[1];
END
$$;

--
-- Name: idempotency_claim_all(bigint[], text, text[], text[], timestamp with time zone[], text, integer[], jsonb[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_claim_all(p_user_id bigint[], p_op text, p_idem_key text[], p_request_hash text[], p_expires_at timestamp with time zone[], p_status text, p_response_status integer[], p_response_body jsonb[]) RETURNS bigint[]
    LANGUAGE plpgsql
    AS $$
-- plpgsql, not sql: a plpgsql function keeps its statement's plan for the session, while a
-- sql function that writes is planned again on every call (before PostgreSQL 18).
DECLARE
    v_ids BIGINT[];
BEGIN
    WITH claimed AS (
        INSERT INTO idempotency_keys
            (user_id, op, idem_key, request_hash, status, response_status, response_body, expires_at)
        SELECT t.user_id, p_op, t.idem_key, t.request_hash, p_status, t.response_status,
               t.response_body, t.expires_at
        FROM unnest(p_user_id, p_idem_key, p_request_hash, p_expires_at, p_response_status,
                    p_response_body) AS t(user_id, idem_key, request_hash, expires_at,
                                          response_status, response_body)
        ON CONFLICT (user_id, op, idem_key) DO NOTHING
        RETURNING id)
    SELECT array_agg(id) INTO v_ids FROM claimed;
    RETURN coalesce(v_ids, '{}');
END
$$;

--
-- Name: idempotency_finish(bigint, text, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_finish(p_record_id bigint, p_status text, p_response_status integer, p_response_body jsonb) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: idempotency_record(bigint, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_record(p_user_id bigint, p_op text, p_idem_key text) RETURNS TABLE(status text, response_status integer, response_body text, request_hash text)
    LANGUAGE sql STABLE
    AS $$
    SELECT k.status, k.response_status, k.response_body::TEXT, k.request_hash
    FROM idempotency_keys k
    WHERE k.user_id = p_user_id AND k.op = p_op AND k.idem_key = p_idem_key
$$;

--
-- Name: idempotency_response_text(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.idempotency_response_text(body jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT body::TEXT $$;

--
-- Name: ledger_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END
$$;

--
-- Name: notifications_stage(bigint[], text[], bigint[], text[], bigint[], text[], text[], text[], bigint[], text[], bigint[], text[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notifications_stage(p_merchant_id bigint[], p_kind text[], p_order_id bigint[], p_object_status text[], p_amount_minor bigint[], p_currency text[], p_provider text[], p_event_id text[], p_transfer_id bigint[], p_payment_id text[], p_refund_request_id bigint[], p_detail text[], p_dispute_id text[] DEFAULT NULL::text[]) RETURNS integer
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO merchant_notifications
        (merchant_id, endpoint_id, kind, order_id, object_status, reference, amount_minor,
         currency, provider, event_id, transfer_id, payment_id, refund_request_id, detail,
         dispute_id)
    SELECT t.merchant_id, e.endpoint_id, t.kind, t.order_id, t.object_status, o.reference,
           t.amount_minor, t.currency, t.provider, t.event_id, t.transfer_id, t.payment_id,
           t.refund_request_id, t.detail, t.dispute_id
    FROM unnest(p_merchant_id, p_kind, p_order_id, p_object_status, p_amount_minor, p_currency,
                p_provider, p_event_id, p_transfer_id, p_payment_id, p_refund_request_id, p_detail,
                p_dispute_id)
         WITH ORDINALITY AS t(merchant_id, kind, order_id, object_status, amount_minor, currency,
                              provider, event_id, transfer_id, payment_id, refund_request_id,
                              detail, dispute_id, n)
    CROSS JOIN LATERAL (
        SELECT w.id FROM webhook_endpoints w
        WHERE w.merchant_id = t.merchant_id
          AND CASE WHEN t.kind = 'ping' THEN w.id = t.detail
                   ELSE cardinality(w.filter_types) = 0 OR t.kind = ANY (w.filter_types) END
        UNION ALL
        SELECT 'file'
        WHERE NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.merchant_id = t.merchant_id)
    ) AS e(endpoint_id)
    LEFT JOIN orders o ON o.id = t.order_id AND o.user_id = t.merchant_id
    WHERE t.kind IS NOT NULL
    ORDER BY t.n, e.endpoint_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

--
-- Name: payment_apply(bigint, text, text, text, bigint, text, text, text, bigint, text, bigint, bigint, text, text, text, bigint, text, bigint, text, bigint, bigint, text, text, bigint, text, text, text, text, bigint, bigint, bigint, text, text, boolean, text, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.payment_apply(p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_payment_from text, p_disputed_from bigint, p_disputed_to bigint, p_dispute_id text, p_account_c text, p_amount_c bigint, p_dispute_funds_from text, p_dispute_outcome_from text, p_dispute_funds_to text, p_dispute_outcome_to text, p_dispute_withdrawn bigint, p_dispute_fee bigint, p_dispute_reinstated bigint, p_dispute_account text, p_dispute_note text, p_notify boolean DEFAULT false, p_reason text DEFAULT NULL::text, p_dispute_reinstated_by text DEFAULT NULL::text, p_disputes_exceeded boolean DEFAULT false, OUT result public.payment_apply_result, OUT transfer_id bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
BEGIN
    BEGIN
        transfer_id := (payment_apply_all(ARRAY[NULL::BIGINT], ARRAY[p_merchant_id],
            ARRAY[p_provider], ARRAY[p_event_id], ARRAY[p_payment_id], ARRAY[p_order_id],
            ARRAY[p_order_from], ARRAY[p_order_to], ARRAY[p_payment_status], ARRAY[p_amount_minor],
            ARRAY[p_currency], ARRAY[p_refunded_from], ARRAY[p_refunded_to], ARRAY[p_kind],
            ARRAY[p_refund_id], ARRAY[p_account_a], ARRAY[p_amount_a], ARRAY[p_account_b],
            ARRAY[p_amount_b], ARRAY[p_payment_from], ARRAY[p_disputed_from],
            ARRAY[p_disputed_to], ARRAY[p_dispute_id],
            CASE WHEN p_account_c IS NOT NULL THEN ARRAY[p_account_c] END,
            CASE WHEN p_account_c IS NOT NULL THEN ARRAY[p_amount_c] END,
            ARRAY[p_notify], ARRAY[p_reason]))[1];
        IF p_dispute_funds_to IS NOT NULL OR p_disputes_exceeded THEN
            PERFORM payment_disputes_write(p_merchant_id, p_provider, p_dispute_id, p_payment_id,
                p_order_id, p_dispute_funds_from, p_dispute_outcome_from, p_dispute_funds_to,
                p_dispute_outcome_to, p_currency, p_dispute_withdrawn, p_dispute_fee,
                p_dispute_reinstated, p_dispute_account, p_dispute_note, p_dispute_reinstated_by,
                p_disputes_exceeded);
        END IF;
        result := 'applied';
    EXCEPTION
        WHEN SQLSTATE 'CGD01' THEN
            result := 'state_changed';
            transfer_id := NULL;
        WHEN SQLSTATE 'CGD02' THEN
            result := 'already_posted';
            transfer_id := NULL;
    END;
END
$$;

--
-- Name: payment_apply_all(bigint[], bigint[], text[], text[], text[], bigint[], text[], text[], text[], bigint[], text[], bigint[], bigint[], text[], text[], text[], bigint[], text[], bigint[], text[], bigint[], bigint[], text[], text[], bigint[], boolean[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.payment_apply_all(p_transfer_id bigint[], p_merchant_id bigint[], p_provider text[], p_event_id text[], p_payment_id text[], p_order_id bigint[], p_order_from text[], p_order_to text[], p_payment_status text[], p_amount_minor bigint[], p_currency text[], p_refunded_from bigint[], p_refunded_to bigint[], p_kind text[], p_refund_id text[], p_account_a text[], p_amount_a bigint[], p_account_b text[], p_amount_b bigint[], p_payment_from text[] DEFAULT NULL::text[], p_disputed_from bigint[] DEFAULT NULL::bigint[], p_disputed_to bigint[] DEFAULT NULL::bigint[], p_dispute_id text[] DEFAULT NULL::text[], p_account_c text[] DEFAULT NULL::text[], p_amount_c bigint[] DEFAULT NULL::bigint[], p_notify boolean[] DEFAULT NULL::boolean[], p_reason text[] DEFAULT NULL::text[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_transfer_id BIGINT[];
    v_expected INT;
    v_count INT;
    v_kind TEXT[];
    v_status TEXT[];
BEGIN
    v_expected := cardinality(array_remove(p_order_to, NULL));
    IF v_expected > 0 THEN
        UPDATE orders o SET status = t.order_to
        FROM unnest(p_order_id, p_merchant_id, p_order_from, p_order_to, p_amount_minor, p_currency)
             AS t(order_id, merchant_id, order_from, order_to, amount_minor, currency)
        WHERE t.order_to IS NOT NULL AND o.id = ANY(p_order_id)
          AND o.id = t.order_id AND o.user_id = t.merchant_id AND o.status = t.order_from
          AND (t.order_from <> 'pending_payment'
               OR (o.amount_minor = t.amount_minor AND o.currency = t.currency));
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'order not in the planned state';
        END IF;
    END IF;

    -- A capture or a failure takes a new payment id or a pending/failed one; a refund or a
    -- dispute moves a captured payment on from the state its plan read.
    v_expected := cardinality(p_refunded_to) - cardinality(array_remove(p_refunded_to, NULL));
    IF v_expected > 0 THEN
        INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency)
        SELECT t.merchant_id, t.provider, t.payment_id, t.order_id, t.status, t.amount_minor, t.currency
        FROM unnest(p_merchant_id, p_provider, p_payment_id, p_order_id, p_payment_status,
                    p_amount_minor, p_currency, p_refunded_to)
             AS t(merchant_id, provider, payment_id, order_id, status, amount_minor, currency, refunded_to)
        WHERE t.refunded_to IS NULL
        ON CONFLICT (merchant_id, provider, payment_id) DO UPDATE
        SET order_id = EXCLUDED.order_id, status = EXCLUDED.status, amount_minor = EXCLUDED.amount_minor,
            currency = EXCLUDED.currency, updated_at = now()
        WHERE payments.status IN ('pending', 'failed');
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment not in the planned state';
        END IF;
    END IF;
    IF v_expected < cardinality(p_merchant_id) THEN
        v_expected := cardinality(p_merchant_id) - v_expected;
        UPDATE payments p
        SET refunded_minor = t.refunded_to, disputed_minor = t.disputed_to, status = t.status,
            updated_at = now()
        FROM unnest(p_merchant_id, p_provider, p_payment_id, p_payment_status, p_refunded_from,
                    p_refunded_to, p_payment_from, p_disputed_from, p_disputed_to)
             AS t(merchant_id, provider, payment_id, status, refunded_from, refunded_to,
                  status_from, disputed_from, disputed_to)
        WHERE t.refunded_to IS NOT NULL
          AND p.merchant_id = ANY(p_merchant_id) AND p.provider = ANY(p_provider)
          AND p.payment_id = ANY(p_payment_id)
          AND p.merchant_id = t.merchant_id AND p.provider = t.provider AND p.payment_id = t.payment_id
          AND p.status = t.status_from
          AND p.refunded_minor = t.refunded_from
          AND p.disputed_minor = t.disputed_from;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment not in the planned state';
        END IF;
    END IF;

    v_transfer_id := ARRAY(
        SELECT CASE WHEN t.kind IS NOT NULL THEN coalesce(t.id, nextval('ledger_transfers_id_seq')) END
        FROM unnest(p_kind, p_transfer_id) WITH ORDINALITY AS t(kind, id, item)
        ORDER BY t.item);
    v_expected := cardinality(array_remove(v_transfer_id, NULL));
    IF v_expected > 0 THEN
        INSERT INTO ledger_transfers
            (id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id, dispute_id)
        SELECT t.id, t.merchant_id, t.provider, t.event_id, t.kind, t.order_id, t.payment_id,
               t.refund_id, t.dispute_id
        FROM unnest(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_kind, p_order_id,
                    p_payment_id, p_refund_id, p_dispute_id)
             AS t(id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id, dispute_id)
        WHERE t.id IS NOT NULL
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event, refund or dispute already posted';
        END IF;
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT t.id, t.merchant_id, e.account, t.currency, e.amount_minor
        FROM unnest(v_transfer_id, p_merchant_id, p_currency, p_account_a, p_amount_a, p_account_b, p_amount_b)
             AS t(id, merchant_id, currency, account_a, amount_a, account_b, amount_b)
        CROSS JOIN LATERAL (VALUES (t.account_a, t.amount_a), (t.account_b, t.amount_b))
             AS e(account, amount_minor)
        WHERE t.id IS NOT NULL;
        -- A chargeback's fee is its third entry. Its own statement, so a capture (no third
        -- entry, p_account_c NULL) pays one NULL test for it rather than a wider insert.
        IF p_account_c IS NOT NULL THEN
            INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
            SELECT t.id, t.merchant_id, t.account_c, t.currency, t.amount_c
            FROM unnest(v_transfer_id, p_merchant_id, p_currency, p_account_c, p_amount_c)
                 AS t(id, merchant_id, currency, account_c, amount_c)
            WHERE t.id IS NOT NULL AND t.account_c IS NOT NULL;
        END IF;
    END IF;

    -- The merchants that have an endpoint hear of it: the order's new status, or the held
    -- capture. NULL (no item notifies, the common case without [[merchants]]) skips it all.
    -- A dispute's item carries its dispute id (NULL for a capture's or a refund's).
    IF true = ANY(p_notify) THEN
        SELECT array_agg(CASE WHEN NOT coalesce(t.notify, false) THEN NULL
                              WHEN t.order_to IS NOT NULL THEN 'order.' || t.order_to
                              WHEN t.payment_status = 'held' AND t.refunded_to IS NULL THEN 'payment.held'
                         END ORDER BY t.n),
               array_agg(coalesce(t.order_to, t.payment_status) ORDER BY t.n)
        INTO v_kind, v_status
        FROM unnest(p_notify, p_order_to, p_payment_status, p_refunded_to)
             WITH ORDINALITY AS t(notify, order_to, payment_status, refunded_to, n);
        v_count := notifications_stage(p_merchant_id, v_kind, p_order_id, v_status, p_amount_minor,
            p_currency, p_provider, p_event_id, v_transfer_id, p_payment_id, NULL, p_reason,
            p_dispute_id);
    END IF;

    -- A posted refund settles the merchant's refund request it answers, in this transaction.
    FOR i IN 1 .. cardinality(p_kind) LOOP
        IF p_kind[i] = 'refund' THEN
            PERFORM refund_requests_settle(p_merchant_id[i], p_provider[i], p_payment_id[i],
                                           p_refund_id[i], p_refunded_to[i],
                                           coalesce(p_notify[i], false), p_event_id[i], v_transfer_id[i]);
        END IF;
    END LOOP;
    RETURN v_transfer_id;
END
$$;

--
-- Name: payment_apply_strict(bigint, bigint, text, text, text, bigint, text, text, text, bigint, text, bigint, bigint, text, text, text, bigint, text, bigint, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.payment_apply_strict(p_transfer_id bigint, p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_notify boolean DEFAULT false, p_reason text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN (payment_apply_all(ARRAY[p_transfer_id], ARRAY[p_merchant_id], ARRAY[p_provider],
        ARRAY[p_event_id], ARRAY[p_payment_id], ARRAY[p_order_id], ARRAY[p_order_from],
        ARRAY[p_order_to], ARRAY[p_payment_status], ARRAY[p_amount_minor], ARRAY[p_currency],
        ARRAY[p_refunded_from], ARRAY[p_refunded_to], ARRAY[p_kind], ARRAY[p_refund_id],
        ARRAY[p_account_a], ARRAY[p_amount_a], ARRAY[p_account_b], ARRAY[p_amount_b],
        p_notify => ARRAY[p_notify], p_reason => ARRAY[p_reason]))[1];
END
$$;

--
-- Name: payment_disputes_write(bigint, text, text, text, bigint, text, text, text, text, text, bigint, bigint, bigint, text, text, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.payment_disputes_write(p_merchant_id bigint, p_provider text, p_dispute_id text, p_payment_id text, p_order_id bigint, p_funds_from text, p_outcome_from text, p_funds_to text, p_outcome_to text, p_currency text, p_withdrawn_minor bigint, p_fee_minor bigint, p_reinstated_minor bigint, p_account text, p_note text, p_reinstated_by text DEFAULT NULL::text, p_payment_exceeded boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- The payment's refunds and what its disputes hold back exceed what was captured (its plan
    -- decided it): each dispute still holding funds is in front of finance.
    IF p_payment_exceeded THEN
        UPDATE payment_disputes SET note = 'exceeds_remaining', updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider
          AND payment_id = p_payment_id AND withdrawn_minor > reinstated_minor
          AND note IS DISTINCT FROM 'exceeds_remaining';
    END IF;
    -- A dispute's own row (none to write for a refund).
    IF p_funds_to IS NULL THEN
        RETURN;
    END IF;
    IF p_funds_from IS NULL THEN
        INSERT INTO payment_disputes
            (merchant_id, provider, dispute_id, payment_id, order_id, funds, outcome, currency,
             withdrawn_minor, fee_minor, reinstated_minor, account, note, reinstated_by)
        VALUES (p_merchant_id, p_provider, p_dispute_id, p_payment_id, p_order_id, p_funds_to,
                p_outcome_to, p_currency, p_withdrawn_minor, p_fee_minor, p_reinstated_minor,
                p_account, p_note, p_reinstated_by)
        ON CONFLICT ON CONSTRAINT uq_payment_disputes DO NOTHING;
    ELSE
        UPDATE payment_disputes
        SET order_id = p_order_id, funds = p_funds_to, outcome = p_outcome_to,
            currency = p_currency, withdrawn_minor = p_withdrawn_minor, fee_minor = p_fee_minor,
            reinstated_minor = p_reinstated_minor, account = p_account, note = p_note,
            reinstated_by = coalesce(p_reinstated_by, reinstated_by), updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND dispute_id = p_dispute_id
          AND funds = p_funds_from AND outcome = p_outcome_from;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'dispute not in the planned state';
    END IF;
END
$$;

--
-- Name: payout_apply(bigint, text, text, text, text, text, bigint, text, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.payout_apply(p_merchant_id bigint, p_provider text, p_event_id text, p_payout_id text, p_status_from text, p_status_to text, p_amount_minor bigint, p_currency text, p_kind text, p_account_to text, p_account_from text, OUT result public.payment_apply_result, OUT transfer_id bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_count INT;
BEGIN
    BEGIN
        IF p_status_from IS NULL THEN
            INSERT INTO payouts (merchant_id, provider, payout_id, status, amount_minor, currency)
            VALUES (p_merchant_id, p_provider, p_payout_id, p_status_to, p_amount_minor, p_currency)
            ON CONFLICT DO NOTHING;
        ELSE
            UPDATE payouts SET status = p_status_to, updated_at = now()
            WHERE merchant_id = p_merchant_id AND provider = p_provider
              AND payout_id = p_payout_id AND status = p_status_from;
        END IF;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payout not in the planned state';
        END IF;
        IF p_kind IS NOT NULL THEN
            transfer_id := nextval('ledger_transfers_id_seq');
            INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
            VALUES (transfer_id, p_merchant_id, p_provider, p_event_id, p_kind, p_payout_id)
            ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            IF v_count <> 1 THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event already posted';
            END IF;
            INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
            VALUES (transfer_id, p_merchant_id, p_account_to, p_currency, p_amount_minor),
                   (transfer_id, p_merchant_id, p_account_from, p_currency, -p_amount_minor);
        END IF;
        result := 'applied';
    EXCEPTION
        WHEN SQLSTATE 'CGD01' THEN
            result := 'state_changed';
            transfer_id := NULL;
        WHEN SQLSTATE 'CGD02' THEN
            result := 'already_posted';
            transfer_id := NULL;
    END;
END
$$;

--
-- Name: refund_request_accepted(bigint, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refund_request_accepted(p_request_id bigint, p_refund_id text, p_notify boolean DEFAULT false) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_request refund_requests%ROWTYPE;
    v_refunded BIGINT;
    v_transfer_id BIGINT;
    v_event_id TEXT;
BEGIN
    UPDATE refund_requests SET status = 'pending', provider_refund_id = p_refund_id, updated_at = now()
    WHERE id = p_request_id AND status = 'processing'
    RETURNING * INTO v_request;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.id, t.event_id INTO v_transfer_id, v_event_id FROM ledger_transfers t
    WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
      AND t.refund_id = p_refund_id;
    IF FOUND THEN
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, p_refund_id, NULL, p_notify, v_event_id, v_transfer_id);
    ELSIF EXISTS (SELECT 1 FROM ledger_transfers t
                  WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
                    AND t.payment_id = v_request.payment_id AND t.kind = 'refund'
                    AND t.refund_id IS NULL) THEN
        -- This payment's refunds post without ids (cumulative): the total decides.
        SELECT p.refunded_minor INTO v_refunded FROM payments p
        WHERE p.merchant_id = v_request.merchant_id AND p.provider = v_request.provider
          AND p.payment_id = v_request.payment_id;
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, NULL, v_refunded, p_notify);
    END IF;
    SELECT status INTO v_request.status FROM refund_requests WHERE id = p_request_id;
    RETURN v_request.status;
END
$$;

--
-- Name: refund_request_fail(bigint, text, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refund_request_fail(p_request_id bigint, p_from text, p_message text, p_notify boolean DEFAULT false) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_staged INT;
BEGIN
    UPDATE refund_requests SET status = 'failed', failure_message = p_message, updated_at = now()
    WHERE id = p_request_id AND status = p_from;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_notify THEN
        v_staged := refund_requests_stage_notifications(ARRAY[p_request_id], NULL, NULL);
    END IF;
    RETURN true;
END
$$;

--
-- Name: refund_requests_settle(bigint, text, text, text, bigint, boolean, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refund_requests_settle(p_merchant_id bigint, p_provider text, p_payment_id text, p_refund_id text, p_refunded_total bigint, p_notify boolean DEFAULT false, p_event_id text DEFAULT NULL::text, p_transfer_id bigint DEFAULT NULL::bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_covered BIGINT;
    v_request RECORD;
    v_settled BIGINT[] := '{}';
    v_staged INT;
BEGIN
    IF p_refund_id IS NOT NULL THEN
        WITH settled AS (
            UPDATE refund_requests SET status = 'succeeded', updated_at = now()
            WHERE merchant_id = p_merchant_id AND provider = p_provider
              AND provider_refund_id = p_refund_id AND status = 'pending'
            RETURNING id)
        SELECT coalesce(array_agg(id), '{}') INTO v_settled FROM settled;
    ELSIF p_refunded_total IS NOT NULL THEN
        SELECT coalesce(sum(amount_minor), 0) INTO v_covered
        FROM refund_requests
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id
          AND status = 'succeeded';
        FOR v_request IN
            SELECT id, amount_minor FROM refund_requests
            WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id
              AND status = 'pending'
            ORDER BY id
            FOR UPDATE
        LOOP
            EXIT WHEN v_covered + v_request.amount_minor > p_refunded_total;
            v_covered := v_covered + v_request.amount_minor;
            UPDATE refund_requests SET status = 'succeeded', updated_at = now() WHERE id = v_request.id;
            v_settled := v_settled || v_request.id;
        END LOOP;
    END IF;
    IF p_notify AND cardinality(v_settled) > 0 THEN
        v_staged := refund_requests_stage_notifications(v_settled, p_event_id, p_transfer_id);
    END IF;
END
$$;

--
-- Name: refund_requests_stage_notifications(bigint[], text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refund_requests_stage_notifications(p_request_id bigint[], p_event_id text, p_transfer_id bigint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_merchant_id BIGINT[]; v_kind TEXT[]; v_order_id BIGINT[]; v_status TEXT[];
    v_amount_minor BIGINT[]; v_currency TEXT[]; v_provider TEXT[]; v_payment_id TEXT[];
    v_id BIGINT[]; v_detail TEXT[];
BEGIN
    SELECT array_agg(r.merchant_id ORDER BY r.id), array_agg('refund_request.' || r.status ORDER BY r.id),
           array_agg(r.order_id ORDER BY r.id), array_agg(r.status ORDER BY r.id),
           array_agg(r.amount_minor ORDER BY r.id), array_agg(r.currency ORDER BY r.id),
           array_agg(r.provider ORDER BY r.id), array_agg(r.payment_id ORDER BY r.id),
           array_agg(r.id ORDER BY r.id), array_agg(r.failure_message ORDER BY r.id)
    INTO v_merchant_id, v_kind, v_order_id, v_status, v_amount_minor, v_currency, v_provider,
         v_payment_id, v_id, v_detail
    FROM refund_requests r
    WHERE r.id = ANY(p_request_id) AND r.status IN ('succeeded', 'failed');
    IF v_id IS NULL THEN
        RETURN 0;
    END IF;
    RETURN notifications_stage(v_merchant_id, v_kind, v_order_id, v_status, v_amount_minor,
        v_currency, v_provider, array_fill(p_event_id, ARRAY[cardinality(v_id)]),
        array_fill(p_transfer_id, ARRAY[cardinality(v_id)]), v_payment_id, v_id, v_detail);
END
$$;

--
-- Name: settlement_fees_post(bigint, text, text[], text[], text[], bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.settlement_fees_post(p_merchant_id bigint, p_provider text, p_reference text[], p_payment_id text[], p_currency text[], p_fee_minor bigint[]) RETURNS SETOF text
    LANGUAGE sql
    AS $$
    WITH fees AS (
        SELECT DISTINCT ON (t.reference) 'settlement:' || t.reference AS event_id, t.payment_id,
               t.currency, t.fee_minor
        FROM unnest(p_reference, p_payment_id, p_currency, p_fee_minor)
             AS t(reference, payment_id, currency, fee_minor)
        ORDER BY t.reference
    ), posted AS (
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
        SELECT nextval('ledger_transfers_id_seq'), p_merchant_id, p_provider, f.event_id, 'fee',
               f.payment_id
        FROM fees f
        ON CONFLICT DO NOTHING
        RETURNING id, event_id
    ), entries AS (
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT p.id, p_merchant_id, e.account, t.currency, e.amount_minor
        FROM posted p
        JOIN fees t ON t.event_id = p.event_id
        CROSS JOIN LATERAL (VALUES ('psp_fees:' || p_provider, t.fee_minor),
                                   ('psp_clearing:' || p_provider, -t.fee_minor))
             AS e(account, amount_minor)
        RETURNING transfer_id
    )
    -- The entries are written whether or not this select reads them (a data-modifying CTE
    -- always runs); reading them ties the answer to what was written.
    SELECT DISTINCT substr(p.event_id, length('settlement:') + 1)
    FROM posted p JOIN entries e ON e.transfer_id = p.id;
$$;

--
-- Name: settlement_fx_post(bigint, text, text[], text[], text[], bigint[], text[], bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.settlement_fx_post(p_merchant_id bigint, p_provider text, p_reference text[], p_payment_id text[], p_from_currency text[], p_from_minor bigint[], p_to_currency text[], p_to_minor bigint[]) RETURNS SETOF text
    LANGUAGE sql
    AS $$
    WITH conversions AS (
        SELECT DISTINCT ON (t.reference) 'settlement-fx:' || t.reference AS event_id,
               t.payment_id, t.from_currency, t.from_minor, t.to_currency, t.to_minor
        FROM unnest(p_reference, p_payment_id, p_from_currency, p_from_minor, p_to_currency,
                    p_to_minor)
             AS t(reference, payment_id, from_currency, from_minor, to_currency, to_minor)
        ORDER BY t.reference
    ), posted AS (
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id)
        SELECT nextval('ledger_transfers_id_seq'), p_merchant_id, p_provider, c.event_id, 'fx',
               c.payment_id
        FROM conversions c
        ON CONFLICT DO NOTHING
        RETURNING id, event_id
    ), entries AS (
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT p.id, p_merchant_id, e.account, e.currency, e.amount_minor
        FROM posted p
        JOIN conversions c ON c.event_id = p.event_id
        CROSS JOIN LATERAL (VALUES
            ('psp_clearing:' || p_provider, c.from_currency, -c.from_minor),
            ('fx:' || p_provider, c.from_currency, c.from_minor),
            ('fx:' || p_provider, c.to_currency, -c.to_minor),
            ('psp_clearing:' || p_provider, c.to_currency, c.to_minor))
             AS e(account, currency, amount_minor)
        -- A line whose gross became nothing after rounding (50 IDR is 0.00 EUR) moves its gross
        -- into fx and nothing back: a ledger entry is never zero.
        WHERE e.amount_minor <> 0
        RETURNING transfer_id
    )
    SELECT DISTINCT substr(p.event_id, length('settlement-fx:') + 1)
    FROM posted p JOIN entries e ON e.transfer_id = p.id;
$$;

--
-- Name: callback_deliveries_digest(bytea); Type: AGGREGATE; Schema: public; Owner: -
--

CREATE AGGREGATE public.callback_deliveries_digest(bytea) (
    SFUNC = public.callback_deliveries_digest_step,
    STYPE = bytea,
    INITCOND = ''
);

--
-- Name: api_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_tokens (
    id bigint NOT NULL,
    user_id bigint NOT NULL,
    token_sha256 text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: api_tokens_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.api_tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: api_tokens_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.api_tokens_id_seq OWNED BY public.api_tokens.id;

--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    actor text NOT NULL,
    role text NOT NULL,
    action text NOT NULL,
    target text,
    request_id text,
    outcome text NOT NULL,
    changes jsonb DEFAULT '{}'::jsonb NOT NULL,
    prev_hash text NOT NULL,
    row_hash text NOT NULL
);

--
-- Name: audit_log_chain; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log_chain (
    only_row boolean DEFAULT true NOT NULL,
    last_id bigint NOT NULL,
    last_hash text NOT NULL,
    CONSTRAINT audit_log_chain_only_row_check CHECK (only_row)
);

--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: audit_log_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;

--
-- Name: callback_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callback_deliveries (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    body bytea NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    event_type text,
    outcome text,
    reason text,
    ack_status integer,
    transfer_id bigint,
    trace_id text,
    CONSTRAINT callback_deliveries_outcome_check CHECK ((outcome = ANY (ARRAY['applied'::text, 'held'::text, 'ignored'::text, 'rejected'::text])))
)
PARTITION BY RANGE (received_at);

--
-- Name: callback_deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.callback_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: callback_deliveries_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.callback_deliveries_id_seq OWNED BY public.callback_deliveries.id;

--
-- Name: callback_minute_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callback_minute_counts (
    minute bigint NOT NULL,
    outcome text NOT NULL,
    count bigint NOT NULL,
    CONSTRAINT callback_minute_counts_count_check CHECK ((count > 0))
);

--
-- Name: callback_minute_state; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callback_minute_state (
    singleton boolean DEFAULT true NOT NULL,
    through_delivery_id bigint DEFAULT 0 NOT NULL,
    pending_delivery_id bigint,
    pending_writers text[],
    CONSTRAINT callback_minute_state_singleton_check CHECK (singleton)
);

--
-- Name: idempotency_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.idempotency_keys (
    id bigint NOT NULL,
    user_id bigint NOT NULL,
    op text NOT NULL,
    idem_key text NOT NULL,
    request_hash text NOT NULL,
    status text DEFAULT 'processing'::text NOT NULL,
    response_status integer,
    response_body jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    locked_until timestamp with time zone,
    lease_token text
);

--
-- Name: idempotency_keys_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.idempotency_keys_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: idempotency_keys_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.idempotency_keys_id_seq OWNED BY public.idempotency_keys.id;

--
-- Name: ledger_balance_checkpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_balance_checkpoints (
    merchant_id bigint NOT NULL,
    through_entry_id bigint NOT NULL,
    balances jsonb NOT NULL,
    taken_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ledger_balance_checkpoints_through_entry_id_check CHECK ((through_entry_id > 0))
);

--
-- Name: ledger_checkpoint_state; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_checkpoint_state (
    singleton boolean DEFAULT true NOT NULL,
    through_entry_id bigint DEFAULT 0 NOT NULL,
    pending_entry_id bigint,
    pending_writers text[],
    CONSTRAINT ledger_checkpoint_state_singleton_check CHECK (singleton)
);

--
-- Name: ledger_entries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_entries (
    id bigint NOT NULL,
    transfer_id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    account text NOT NULL,
    currency text NOT NULL,
    amount_minor bigint NOT NULL,
    CONSTRAINT ledger_entries_amount_minor_check CHECK ((amount_minor <> 0))
);

--
-- Name: ledger_entries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.ledger_entries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: ledger_entries_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.ledger_entries_id_seq OWNED BY public.ledger_entries.id;

--
-- Name: ledger_transfers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_transfers (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    kind text NOT NULL,
    order_id bigint,
    payment_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    refund_id text,
    dispute_id text,
    CONSTRAINT ledger_transfers_kind_check CHECK ((kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text, 'chargeback_reversal'::text, 'refund_reversal'::text, 'payout'::text, 'payout_reversal'::text, 'fee'::text, 'fx'::text])))
);

--
-- Name: ledger_transfers_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.ledger_transfers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: ledger_transfers_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.ledger_transfers_id_seq OWNED BY public.ledger_transfers.id;

--
-- Name: merchant_notifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.merchant_notifications (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    kind text NOT NULL,
    order_id bigint,
    object_status text NOT NULL,
    reference text,
    amount_minor bigint,
    currency text,
    provider text,
    event_id text,
    transfer_id bigint,
    payment_id text,
    refund_request_id bigint,
    detail text,
    dispute_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_attempt_at timestamp with time zone,
    last_status integer,
    last_error text,
    delivered_at timestamp with time zone,
    endpoint_id text DEFAULT 'file'::text NOT NULL,
    CONSTRAINT merchant_notifications_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

--
-- Name: merchant_notifications_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.merchant_notifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: merchant_notifications_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.merchant_notifications_id_seq OWNED BY public.merchant_notifications.id;

--
-- Name: notification_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notification_attempts (
    id bigint NOT NULL,
    notification_id bigint NOT NULL,
    attempt integer NOT NULL,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    status_code integer,
    error text
);

--
-- Name: notification_attempts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.notification_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: notification_attempts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.notification_attempts_id_seq OWNED BY public.notification_attempts.id;

--
-- Name: notification_endpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notification_endpoints (
    merchant_id bigint NOT NULL,
    disabled_at timestamp with time zone,
    disabled_reason text,
    failing_since timestamp with time zone,
    last_success_at timestamp with time zone,
    last_failure_at timestamp with time zone,
    last_error text,
    dropped bigint DEFAULT 0 NOT NULL,
    last_dropped_at timestamp with time zone,
    endpoint_id text DEFAULT 'file'::text NOT NULL
);

--
-- Name: operators; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operators (
    id bigint NOT NULL,
    name text NOT NULL,
    role text NOT NULL,
    key_sha256 text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone,
    last_used_at timestamp with time zone,
    CONSTRAINT operators_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'::text)),
    CONSTRAINT operators_name_not_bootstrap CHECK ((name <> 'bootstrap'::text)),
    CONSTRAINT operators_role_check CHECK ((role = ANY (ARRAY['viewer'::text, 'finance'::text, 'operator'::text, 'admin'::text])))
);

--
-- Name: operators_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.operators_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: operators_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.operators_id_seq OWNED BY public.operators.id;

--
-- Name: orders; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.orders (
    id bigint NOT NULL,
    user_id bigint NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    reference text,
    status text DEFAULT 'pending_payment'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT orders_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT orders_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT orders_status_check CHECK ((status = ANY (ARRAY['pending_payment'::text, 'paid'::text, 'partially_refunded'::text, 'refunded'::text, 'disputed'::text, 'charged_back'::text])))
)
WITH (fillfactor='85');

--
-- Name: orders_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.orders_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: orders_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.orders_id_seq OWNED BY public.orders.id;

--
-- Name: payment_disputes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.payment_disputes (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    dispute_id text NOT NULL,
    payment_id text NOT NULL,
    order_id bigint,
    funds text NOT NULL,
    outcome text NOT NULL,
    currency text NOT NULL,
    withdrawn_minor bigint DEFAULT 0 NOT NULL,
    fee_minor bigint DEFAULT 0 NOT NULL,
    reinstated_minor bigint DEFAULT 0 NOT NULL,
    account text,
    note text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    reinstated_by text,
    CONSTRAINT payment_disputes_account_check CHECK ((account = ANY (ARRAY['merchant_payable'::text, 'unapplied_funds'::text]))),
    CONSTRAINT payment_disputes_check CHECK (((reinstated_minor >= 0) AND (reinstated_minor <= withdrawn_minor))),
    CONSTRAINT payment_disputes_fee_minor_check CHECK ((fee_minor >= 0)),
    CONSTRAINT payment_disputes_funds_check CHECK ((funds = ANY (ARRAY['none'::text, 'withdrawn'::text, 'reinstated'::text]))),
    CONSTRAINT payment_disputes_note_check CHECK ((note = ANY (ARRAY['exceeds_remaining'::text, 'fee_not_booked'::text]))),
    CONSTRAINT payment_disputes_outcome_check CHECK ((outcome = ANY (ARRAY['open'::text, 'won'::text, 'lost'::text]))),
    CONSTRAINT payment_disputes_withdrawn_minor_check CHECK ((withdrawn_minor >= 0))
);

--
-- Name: payment_disputes_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.payment_disputes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: payment_disputes_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.payment_disputes_id_seq OWNED BY public.payment_disputes.id;

--
-- Name: payments; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.payments (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    payment_id text NOT NULL,
    order_id bigint,
    status text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    refunded_minor bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    disputed_minor bigint DEFAULT 0 NOT NULL,
    CONSTRAINT payments_amount_minor_check CHECK ((amount_minor >= 0)),
    CONSTRAINT payments_check CHECK (((refunded_minor >= 0) AND (refunded_minor <= amount_minor))),
    CONSTRAINT payments_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'succeeded'::text, 'failed'::text, 'partially_refunded'::text, 'refunded'::text, 'held'::text, 'disputed'::text, 'charged_back'::text])))
);

--
-- Name: payments_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.payments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: payments_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.payments_id_seq OWNED BY public.payments.id;

--
-- Name: payouts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.payouts (
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    payout_id text NOT NULL,
    status text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT payouts_status_check CHECK ((status = ANY (ARRAY['paid'::text, 'failed'::text])))
);

--
-- Name: portal_links; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.portal_links (
    link_hash bytea NOT NULL,
    merchant_id bigint NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    opened_at timestamp with time zone,
    CONSTRAINT portal_links_link_hash_check CHECK ((length(link_hash) = 32)),
    CONSTRAINT portal_links_merchant_id_check CHECK ((merchant_id > 0))
);

--
-- Name: portal_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.portal_sessions (
    session_hash bytea NOT NULL,
    merchant_id bigint NOT NULL,
    csrf text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT portal_sessions_merchant_id_check CHECK ((merchant_id > 0)),
    CONSTRAINT portal_sessions_session_hash_check CHECK ((length(session_hash) = 32))
);

--
-- Name: provider_transmissions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_transmissions (
    provider text NOT NULL,
    transmission_id text NOT NULL,
    merchant_id bigint NOT NULL,
    body_sha256 text NOT NULL,
    event_id text NOT NULL,
    valid_until timestamp with time zone NOT NULL,
    first_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    conflicts integer DEFAULT 0 NOT NULL,
    last_conflict_at timestamp with time zone,
    last_conflict_sha256 text,
    last_conflict_event_id text
);

--
-- Name: refund_requests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.refund_requests (
    id bigint NOT NULL,
    merchant_id bigint NOT NULL,
    order_id bigint NOT NULL,
    provider text NOT NULL,
    payment_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    reason text,
    status text DEFAULT 'processing'::text NOT NULL,
    provider_idempotency_key text NOT NULL,
    provider_refund_id text,
    failure_message text,
    idempotency_record_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    review_reason text,
    CONSTRAINT refund_requests_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT refund_requests_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT refund_requests_status_check CHECK ((status = ANY (ARRAY['processing'::text, 'pending'::text, 'succeeded'::text, 'failed'::text])))
);

--
-- Name: refund_requests_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.refund_requests_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: refund_requests_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.refund_requests_id_seq OWNED BY public.refund_requests.id;

--
-- Name: settlement_payouts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.settlement_payouts (
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    payout_id text NOT NULL,
    state text NOT NULL,
    currency text NOT NULL,
    report_minor numeric NOT NULL,
    stated_minor numeric,
    ledger_minor numeric,
    lines bigint NOT NULL,
    differing_items bigint NOT NULL,
    differences jsonb DEFAULT '[]'::jsonb NOT NULL,
    bank text,
    report_file text NOT NULL,
    settled_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: webhook_endpoint_revision; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_endpoint_revision (
    singleton boolean DEFAULT true NOT NULL,
    revision bigint DEFAULT 0 NOT NULL,
    CONSTRAINT webhook_endpoint_revision_singleton_check CHECK (singleton)
);

--
-- Name: webhook_endpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_endpoints (
    id text NOT NULL,
    merchant_id bigint NOT NULL,
    url text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    secret_sealed bytea NOT NULL,
    previous_secret_sealed bytea,
    previous_secret_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    filter_types text[] DEFAULT '{}'::text[] NOT NULL,
    rate_limit_per_sec integer,
    CONSTRAINT webhook_endpoints_description_check CHECK ((length(description) <= 256)),
    CONSTRAINT webhook_endpoints_filter_types_check CHECK (((cardinality(filter_types) <= 32) AND (array_position(filter_types, NULL::text) IS NULL))),
    CONSTRAINT webhook_endpoints_id_check CHECK ((id ~ '^ep_[0-9a-f]{24}$'::text)),
    CONSTRAINT webhook_endpoints_merchant_id_check CHECK ((merchant_id > 0)),
    CONSTRAINT webhook_endpoints_previous_check CHECK (((previous_secret_sealed IS NULL) = (previous_secret_until IS NULL))),
    CONSTRAINT webhook_endpoints_rate_limit_per_sec_check CHECK (((rate_limit_per_sec >= 1) AND (rate_limit_per_sec <= 1000))),
    CONSTRAINT webhook_endpoints_url_check CHECK (((length(url) >= 1) AND (length(url) <= 2048)))
);

--
-- Name: api_tokens id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens ALTER COLUMN id SET DEFAULT nextval('public.api_tokens_id_seq'::regclass);

--
-- Name: callback_deliveries id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callback_deliveries ALTER COLUMN id SET DEFAULT nextval('public.callback_deliveries_id_seq'::regclass);

--
-- Name: idempotency_keys id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.idempotency_keys ALTER COLUMN id SET DEFAULT nextval('public.idempotency_keys_id_seq'::regclass);

--
-- Name: ledger_entries id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_entries ALTER COLUMN id SET DEFAULT nextval('public.ledger_entries_id_seq'::regclass);

--
-- Name: ledger_transfers id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_transfers ALTER COLUMN id SET DEFAULT nextval('public.ledger_transfers_id_seq'::regclass);

--
-- Name: merchant_notifications id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.merchant_notifications ALTER COLUMN id SET DEFAULT nextval('public.merchant_notifications_id_seq'::regclass);

--
-- Name: notification_attempts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_attempts ALTER COLUMN id SET DEFAULT nextval('public.notification_attempts_id_seq'::regclass);

--
-- Name: operators id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operators ALTER COLUMN id SET DEFAULT nextval('public.operators_id_seq'::regclass);

--
-- Name: orders id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.orders ALTER COLUMN id SET DEFAULT nextval('public.orders_id_seq'::regclass);

--
-- Name: payment_disputes id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payment_disputes ALTER COLUMN id SET DEFAULT nextval('public.payment_disputes_id_seq'::regclass);

--
-- Name: payments id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payments ALTER COLUMN id SET DEFAULT nextval('public.payments_id_seq'::regclass);

--
-- Name: refund_requests id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests ALTER COLUMN id SET DEFAULT nextval('public.refund_requests_id_seq'::regclass);

--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

--
-- Name: api_tokens api_tokens_token_sha256_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_token_sha256_key UNIQUE (token_sha256);

--
-- Name: audit_log_chain audit_log_chain_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log_chain
    ADD CONSTRAINT audit_log_chain_pkey PRIMARY KEY (only_row);

--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

--
-- Name: callback_minute_counts callback_minute_counts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callback_minute_counts
    ADD CONSTRAINT callback_minute_counts_pkey PRIMARY KEY (minute, outcome);

--
-- Name: callback_minute_state callback_minute_state_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callback_minute_state
    ADD CONSTRAINT callback_minute_state_pkey PRIMARY KEY (singleton);

--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (id);

--
-- Name: ledger_balance_checkpoints ledger_balance_checkpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_balance_checkpoints
    ADD CONSTRAINT ledger_balance_checkpoints_pkey PRIMARY KEY (merchant_id);

--
-- Name: ledger_checkpoint_state ledger_checkpoint_state_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_checkpoint_state
    ADD CONSTRAINT ledger_checkpoint_state_pkey PRIMARY KEY (singleton);

--
-- Name: ledger_entries ledger_entries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_entries
    ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (id);

--
-- Name: ledger_transfers ledger_transfers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_transfers
    ADD CONSTRAINT ledger_transfers_pkey PRIMARY KEY (id);

--
-- Name: merchant_notifications merchant_notifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.merchant_notifications
    ADD CONSTRAINT merchant_notifications_pkey PRIMARY KEY (id);

--
-- Name: notification_attempts notification_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_attempts
    ADD CONSTRAINT notification_attempts_pkey PRIMARY KEY (id);

--
-- Name: notification_endpoints notification_endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_endpoints
    ADD CONSTRAINT notification_endpoints_pkey PRIMARY KEY (merchant_id, endpoint_id);

--
-- Name: operators operators_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operators
    ADD CONSTRAINT operators_pkey PRIMARY KEY (id);

--
-- Name: orders orders_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.orders
    ADD CONSTRAINT orders_pkey PRIMARY KEY (id);

--
-- Name: payment_disputes payment_disputes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payment_disputes
    ADD CONSTRAINT payment_disputes_pkey PRIMARY KEY (id);

--
-- Name: payments payments_merchant_id_provider_payment_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payments
    ADD CONSTRAINT payments_merchant_id_provider_payment_id_key UNIQUE (merchant_id, provider, payment_id);

--
-- Name: payments payments_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payments
    ADD CONSTRAINT payments_pkey PRIMARY KEY (id);

--
-- Name: payouts payouts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payouts
    ADD CONSTRAINT payouts_pkey PRIMARY KEY (merchant_id, provider, payout_id);

--
-- Name: portal_links portal_links_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.portal_links
    ADD CONSTRAINT portal_links_pkey PRIMARY KEY (link_hash);

--
-- Name: portal_sessions portal_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.portal_sessions
    ADD CONSTRAINT portal_sessions_pkey PRIMARY KEY (session_hash);

--
-- Name: provider_transmissions provider_transmissions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_transmissions
    ADD CONSTRAINT provider_transmissions_pkey PRIMARY KEY (provider, transmission_id);

--
-- Name: refund_requests refund_requests_idempotency_record_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests
    ADD CONSTRAINT refund_requests_idempotency_record_id_key UNIQUE (idempotency_record_id);

--
-- Name: refund_requests refund_requests_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests
    ADD CONSTRAINT refund_requests_pkey PRIMARY KEY (id);

--
-- Name: refund_requests refund_requests_provider_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests
    ADD CONSTRAINT refund_requests_provider_idempotency_key_key UNIQUE (provider_idempotency_key);

--
-- Name: settlement_payouts settlement_payouts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.settlement_payouts
    ADD CONSTRAINT settlement_payouts_pkey PRIMARY KEY (merchant_id, provider, payout_id);

--
-- Name: ledger_transfers uq_ledger_transfers_event; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_transfers
    ADD CONSTRAINT uq_ledger_transfers_event UNIQUE (merchant_id, provider, event_id);

--
-- Name: operators uq_operators_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operators
    ADD CONSTRAINT uq_operators_key UNIQUE (key_sha256);

--
-- Name: payment_disputes uq_payment_disputes; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.payment_disputes
    ADD CONSTRAINT uq_payment_disputes UNIQUE (merchant_id, provider, dispute_id);

--
-- Name: webhook_endpoint_revision webhook_endpoint_revision_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoint_revision
    ADD CONSTRAINT webhook_endpoint_revision_pkey PRIMARY KEY (singleton);

--
-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);

--
-- Name: idx_audit_log_action; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_audit_log_action ON public.audit_log USING btree (action, id);

--
-- Name: idx_audit_log_actor; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_audit_log_actor ON public.audit_log USING btree (actor, id);

--
-- Name: idx_audit_log_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_audit_log_at ON public.audit_log USING btree (at, id);

--
-- Name: idx_callback_deliveries_attention; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_attention ON ONLY public.callback_deliveries USING btree (outcome, received_at, id) WHERE (outcome <> 'applied'::text);

--
-- Name: idx_callback_deliveries_event_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_event_id ON ONLY public.callback_deliveries USING btree (event_id);

--
-- Name: idx_callback_deliveries_export; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_export ON ONLY public.callback_deliveries USING btree (provider, received_at, id);

--
-- Name: idx_callback_deliveries_merchant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_merchant ON ONLY public.callback_deliveries USING btree (merchant_id, received_at, id);

--
-- Name: idx_callback_deliveries_received; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_received ON ONLY public.callback_deliveries USING btree (received_at, id);

--
-- Name: idx_callback_deliveries_type; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_callback_deliveries_type ON ONLY public.callback_deliveries USING btree (event_type, received_at, id);

--
-- Name: idx_idempotency_keys_expires_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_idempotency_keys_expires_at ON public.idempotency_keys USING btree (expires_at);

--
-- Name: idx_ledger_entries_merchant_tail; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_ledger_entries_merchant_tail ON public.ledger_entries USING btree (merchant_id, id) INCLUDE (account, currency, amount_minor);

--
-- Name: idx_ledger_entries_transfer_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_ledger_entries_transfer_id ON public.ledger_entries USING btree (transfer_id);

--
-- Name: idx_ledger_transfers_reconcile; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_ledger_transfers_reconcile ON public.ledger_transfers USING btree (merchant_id, provider, created_at);

--
-- Name: idx_merchant_notifications_attention; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_attention ON public.merchant_notifications USING btree (id) WHERE ((status = 'failed'::text) OR ((status = 'pending'::text) AND (last_error IS NOT NULL)));

--
-- Name: idx_merchant_notifications_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_due ON public.merchant_notifications USING btree (merchant_id, endpoint_id, next_attempt_at, id) WHERE (status = 'pending'::text);

--
-- Name: idx_merchant_notifications_failed_retention; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_failed_retention ON public.merchant_notifications USING btree (last_attempt_at) WHERE (status = 'failed'::text);

--
-- Name: idx_merchant_notifications_merchant_finished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_merchant_finished ON public.merchant_notifications USING btree (merchant_id, id) WHERE (status <> 'pending'::text);

--
-- Name: idx_merchant_notifications_order; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_order ON public.merchant_notifications USING btree (order_id, endpoint_id, id) WHERE ((status = 'pending'::text) AND (order_id IS NOT NULL));

--
-- Name: idx_merchant_notifications_retention; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_merchant_notifications_retention ON public.merchant_notifications USING btree (delivered_at) WHERE (status = 'delivered'::text);

--
-- Name: idx_notification_attempts_notification; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_notification_attempts_notification ON public.notification_attempts USING btree (notification_id, id);

--
-- Name: idx_orders_user_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_orders_user_id ON public.orders USING btree (user_id, id);

--
-- Name: idx_payment_disputes_attention_v2; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_payment_disputes_attention_v2 ON public.payment_disputes USING btree (updated_at DESC, id DESC) WHERE ((outcome = 'open'::text) OR (note IS NOT NULL) OR ((outcome = 'won'::text) AND (reinstated_minor < withdrawn_minor)));

--
-- Name: idx_payment_disputes_payment; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_payment_disputes_payment ON public.payment_disputes USING btree (merchant_id, provider, payment_id);

--
-- Name: idx_portal_links_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_portal_links_expires ON public.portal_links USING btree (expires_at);

--
-- Name: idx_portal_sessions_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_portal_sessions_expires ON public.portal_sessions USING btree (expires_at);

--
-- Name: idx_provider_transmissions_conflicts; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_provider_transmissions_conflicts ON public.provider_transmissions USING btree (last_conflict_at DESC) WHERE (conflicts > 0);

--
-- Name: idx_provider_transmissions_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_provider_transmissions_expiry ON public.provider_transmissions USING btree (valid_until);

--
-- Name: idx_refund_requests_attention; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_refund_requests_attention ON public.refund_requests USING btree (updated_at DESC, id DESC) WHERE (status = ANY (ARRAY['failed'::text, 'processing'::text, 'pending'::text]));

--
-- Name: idx_refund_requests_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_refund_requests_due ON public.refund_requests USING btree (next_attempt_at) WHERE ((status = 'processing'::text) AND (review_reason IS NULL));

--
-- Name: idx_refund_requests_in_flight; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_refund_requests_in_flight ON public.refund_requests USING btree (order_id) WHERE (status = ANY (ARRAY['processing'::text, 'pending'::text]));

--
-- Name: idx_refund_requests_payment; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_refund_requests_payment ON public.refund_requests USING btree (merchant_id, provider, payment_id);

--
-- Name: idx_settlement_payouts_settled; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_settlement_payouts_settled ON public.settlement_payouts USING btree (settled_at DESC, payout_id);

--
-- Name: idx_webhook_endpoints_merchant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idx_webhook_endpoints_merchant ON public.webhook_endpoints USING btree (merchant_id);

--
-- Name: uq_idempotency; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_idempotency ON public.idempotency_keys USING btree (user_id, op, idem_key);

--
-- Name: uq_ledger_transfers_dispute; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_ledger_transfers_dispute ON public.ledger_transfers USING btree (merchant_id, provider, dispute_id, kind) WHERE (dispute_id IS NOT NULL);

--
-- Name: uq_ledger_transfers_refund_kind; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_ledger_transfers_refund_kind ON public.ledger_transfers USING btree (merchant_id, provider, refund_id, kind) WHERE (refund_id IS NOT NULL);

--
-- Name: uq_operators_live_name; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_operators_live_name ON public.operators USING btree (name) WHERE (revoked_at IS NULL);

--
-- Name: uq_payment_disputes_reinstated_by; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_payment_disputes_reinstated_by ON public.payment_disputes USING btree (merchant_id, provider, reinstated_by) WHERE (reinstated_by IS NOT NULL);

--
-- Name: uq_refund_requests_provider_refund; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uq_refund_requests_provider_refund ON public.refund_requests USING btree (merchant_id, provider, provider_refund_id) WHERE (provider_refund_id IS NOT NULL);

--
-- Name: audit_log audit_log_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON public.audit_log FOR EACH STATEMENT EXECUTE FUNCTION public.audit_log_refuse_change();

--
-- Name: audit_log audit_log_chain; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_chain BEFORE INSERT ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.audit_log_chain_row();

--
-- Name: audit_log_chain audit_log_chain_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_chain_no_truncate BEFORE TRUNCATE ON public.audit_log_chain FOR EACH STATEMENT EXECUTE FUNCTION public.audit_log_chain_refuse_change();

--
-- Name: audit_log_chain audit_log_chain_one_row; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_chain_one_row BEFORE INSERT OR DELETE ON public.audit_log_chain FOR EACH STATEMENT EXECUTE FUNCTION public.audit_log_chain_refuse_change();

--
-- Name: audit_log audit_log_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON public.audit_log FOR EACH STATEMENT EXECUTE FUNCTION public.audit_log_refuse_change();

--
-- Name: ledger_entries ledger_entries_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ledger_entries_append_only BEFORE DELETE OR UPDATE ON public.ledger_entries FOR EACH STATEMENT EXECUTE FUNCTION public.ledger_refuse_change();

--
-- Name: ledger_transfers ledger_transfers_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ledger_transfers_append_only BEFORE DELETE OR UPDATE ON public.ledger_transfers FOR EACH STATEMENT EXECUTE FUNCTION public.ledger_refuse_change();

--
-- Name: ledger_entries ledger_entries_transfer_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_entries
    ADD CONSTRAINT ledger_entries_transfer_id_fkey FOREIGN KEY (transfer_id) REFERENCES public.ledger_transfers(id);

--
-- Name: notification_attempts notification_attempts_notification_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notification_attempts
    ADD CONSTRAINT notification_attempts_notification_id_fkey FOREIGN KEY (notification_id) REFERENCES public.merchant_notifications(id) ON DELETE CASCADE;

--
-- Name: refund_requests refund_requests_idempotency_record_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests
    ADD CONSTRAINT refund_requests_idempotency_record_id_fkey FOREIGN KEY (idempotency_record_id) REFERENCES public.idempotency_keys(id) ON DELETE SET NULL;

--
-- Name: refund_requests refund_requests_order_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refund_requests
    ADD CONSTRAINT refund_requests_order_id_fkey FOREIGN KEY (order_id) REFERENCES public.orders(id);

--
-- PostgreSQL database dump complete
--

