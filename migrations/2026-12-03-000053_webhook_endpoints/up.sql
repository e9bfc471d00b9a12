-- Merchant endpoints by API (issue 39): a merchant's notification endpoint, created, changed,
-- rotated and deleted without a restart. One per merchant: the outbox sends each merchant's
-- notifications in order, to one place. The signing secret is stored sealed (XChaCha20-Poly1305
-- under `[secrets] key`, the row's id as associated data); the previous secret, while it still
-- signs beside the new one, too.
CREATE TABLE webhook_endpoints (
    id                     TEXT        PRIMARY KEY CHECK (id ~ '^ep_[0-9a-f]{24}$'),
    merchant_id            BIGINT      NOT NULL CHECK (merchant_id > 0),
    url                    TEXT        NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description            TEXT        NOT NULL DEFAULT '' CHECK (length(description) <= 256),
    secret_sealed          BYTEA       NOT NULL,
    previous_secret_sealed BYTEA,
    previous_secret_until  TIMESTAMPTZ,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_webhook_endpoints_merchant UNIQUE (merchant_id),
    CONSTRAINT webhook_endpoints_previous_check
        CHECK ((previous_secret_sealed IS NULL) = (previous_secret_until IS NULL))
);

-- Every change of an endpoint bumps this one row in its own transaction. Each gateway reads it
-- every second (a primary-key lookup) and reloads the endpoints when it moved, so a change
-- reaches every running gateway within about a second, with no restart and no NOTIFY.
CREATE TABLE webhook_endpoint_revision (
    singleton BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
    revision  BIGINT  NOT NULL DEFAULT 0
);
INSERT INTO webhook_endpoint_revision DEFAULT VALUES;
