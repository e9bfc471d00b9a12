-- People and what they did (issue 38): one key per person with one role, and the audit log of
-- every state-changing admin or console action and every console sign-in.

-- An operator key is shown once; only its SHA-256 is stored. A name belongs to one live key
-- at a time (a person whose key was revoked may get a new one under the same name); the audit
-- log names the actor, so (actor, time) always points at one key.
CREATE TABLE operators (
    id           BIGSERIAL   PRIMARY KEY,
    name         TEXT        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
    role         TEXT        NOT NULL CHECK (role IN ('viewer', 'finance', 'operator', 'admin')),
    key_sha256   TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ,
    CONSTRAINT uq_operators_key UNIQUE (key_sha256)
);
-- "bootstrap" is the break-glass `[admin] token`'s actor name: no key may take it.
ALTER TABLE operators ADD CONSTRAINT operators_name_not_bootstrap CHECK (name <> 'bootstrap');
CREATE UNIQUE INDEX uq_operators_live_name ON operators (name) WHERE revoked_at IS NULL;

-- One row per action, written in the action's own transaction. `changes` says what changed,
-- never a secret. Rows are read newest first by id (the cursor), optionally by actor or action.
CREATE TABLE audit_log (
    id         BIGSERIAL   PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    actor      TEXT        NOT NULL,
    role       TEXT        NOT NULL,
    action     TEXT        NOT NULL,
    target     TEXT,
    request_id TEXT,
    outcome    TEXT        NOT NULL,
    changes    JSONB       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX idx_audit_log_actor ON audit_log (actor, id);
CREATE INDEX idx_audit_log_action ON audit_log (action, id);
CREATE INDEX idx_audit_log_at ON audit_log (at, id);

-- Append-only for everyone who connects, the gateway's own role included: the database itself
-- refuses to change, remove or empty the trail (a privilege alone would not bind the table's
-- owner, which the gateway's role usually is). Dropping the table (this migration's down) is
-- a schema change, not an edit of the trail.
CREATE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;
