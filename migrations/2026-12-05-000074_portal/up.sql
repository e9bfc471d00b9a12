-- The merchant portal (docs/portal.md): a one-time link opens a session scoped to /portal.
-- Neither table keeps a token, only its SHA-256: a copy of the database opens nothing.

-- A link made by `POST /v1/portal-sessions` (the merchant's token) or
-- `POST /admin/merchants/{id}/portal-sessions` (an operator): opened at most once, before it
-- expires (`[portal] link_minutes`).
CREATE TABLE portal_links (
    link_hash   BYTEA       PRIMARY KEY CHECK (length(link_hash) = 32),
    merchant_id BIGINT      NOT NULL CHECK (merchant_id > 0),
    -- Who asked for it, as the audit log names them.
    created_by  TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    opened_at   TIMESTAMPTZ
);

-- A browser's session, made when its link was opened; `csrf` is what its forms carry.
CREATE TABLE portal_sessions (
    session_hash BYTEA       PRIMARY KEY CHECK (length(session_hash) = 32),
    merchant_id  BIGINT      NOT NULL CHECK (merchant_id > 0),
    csrf         TEXT        NOT NULL,
    -- Who asked for its link: the merchant, or the operator who opened the portal for it (its
    -- audit rows name them).
    created_by   TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);

-- Expired links and sessions are deleted as new links are made, oldest first.
CREATE INDEX idx_portal_links_expires ON portal_links (expires_at);
CREATE INDEX idx_portal_sessions_expires ON portal_sessions (expires_at);
