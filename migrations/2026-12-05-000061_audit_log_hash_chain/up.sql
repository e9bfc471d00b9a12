-- Tamper evidence for the audit log (issue 54). Each row carries `prev_hash`, the `row_hash` of
-- the row before it, and its own `row_hash`: SHA-256 over `prev_hash` and the row's fields. A
-- row deleted, changed or moved (with the append-only triggers disabled by a superuser or the
-- owner) breaks the chain at the first row after it; `callback-gateway audit verify` walks it.
--
-- One chain however many writers: the hash is computed in a BEFORE INSERT trigger that first
-- locks the chain's head, the one row of `audit_log_chain`. The lock is held until the
-- writer's transaction ends, so the next writer waits, then reads the head its predecessor
-- committed (READ COMMITTED re-reads a row it waited for; a REPEATABLE READ writer gets a
-- serialization failure instead of a fork). The row's id is drawn under the lock too, so id
-- order is chain order. A writer that rolls back leaves the head where it was. Only audit
-- writers wait for each other; the callback path writes no audit row.

-- The chain's text form of a field: its UTF-8 length, a colon and the text, or '-' for NULL;
-- each on its own line. Lengths keep two rows with text moved between fields apart.
CREATE FUNCTION audit_log_hash_field(p_value text) RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(octet_length(convert_to(p_value, 'UTF8'))::text || ':' || p_value, '-') || E'\n' $$;

-- The row's hash: SHA-256, hex, of the previous row's hash, the id, the time in microseconds
-- since the epoch, and every other field (`changes` as jsonb's own text, which is the same
-- for the same value). src/access/chain.rs computes the same bytes on its own, so a verifier
-- does not trust this function.
CREATE FUNCTION audit_log_row_hash(p_prev_hash text, p_id bigint, p_at timestamptz, p_actor text,
                                   p_role text, p_action text, p_target text, p_request_id text,
                                   p_outcome text, p_changes jsonb) RETURNS text
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

-- The head: the newest row's id and hash (0 and 64 zeros before the first row).
CREATE TABLE audit_log_chain (
    only_row  BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    last_id   BIGINT  NOT NULL,
    last_hash TEXT    NOT NULL
);

ALTER TABLE audit_log ADD COLUMN prev_hash TEXT, ADD COLUMN row_hash TEXT;

-- The rows written so far, chained in id order. The append-only trigger refuses UPDATE, so it
-- is off for this one statement loop of the migration (its own transaction).
ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only;
DO $$
DECLARE
    v_prev text := repeat('0', 64);
    v_last bigint := 0;
    r audit_log%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM audit_log ORDER BY id LOOP
        UPDATE audit_log
        SET prev_hash = v_prev,
            row_hash = audit_log_row_hash(v_prev, r.id, r.at, r.actor, r.role, r.action, r.target,
                                          r.request_id, r.outcome, r.changes)
        WHERE id = r.id
        RETURNING row_hash INTO v_prev;
        v_last := r.id;
    END LOOP;
    INSERT INTO audit_log_chain (last_id, last_hash) VALUES (v_last, v_prev);
END
$$;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only;
ALTER TABLE audit_log ALTER COLUMN prev_hash SET NOT NULL, ALTER COLUMN row_hash SET NOT NULL;
-- The trigger draws each id under the chain's lock; a default drawn before it would only
-- skip numbers.
ALTER TABLE audit_log ALTER COLUMN id DROP DEFAULT;

-- Runs as its owner (SECURITY DEFINER): the runtime role may read the head but never write
-- it, so only this trigger moves it.
CREATE FUNCTION audit_log_chain_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
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
CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_chain_row();

-- The head is the chain's: the runtime role reads it (audit verify), never writes it.
REVOKE INSERT, UPDATE, DELETE ON audit_log_chain FROM callback_gateway_runtime;
-- Its one row stays: nobody edits or empties it but the trigger's UPDATE.
CREATE FUNCTION audit_log_chain_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log chain''s head moves only with an audit row: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_chain_one_row BEFORE INSERT OR DELETE ON audit_log_chain
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_chain_refuse_change();
CREATE TRIGGER audit_log_chain_no_truncate BEFORE TRUNCATE ON audit_log_chain
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_chain_refuse_change();
