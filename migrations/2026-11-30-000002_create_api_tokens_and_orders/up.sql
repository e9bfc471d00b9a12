-- API tokens: only the SHA-256 of a token is stored; the token itself is shown once.
CREATE TABLE api_tokens (
    id           BIGSERIAL PRIMARY KEY,
    user_id      BIGINT      NOT NULL,
    token_sha256 TEXT        NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Orders belong to the API user that created them (the merchant).
CREATE TABLE orders (
    id           BIGSERIAL PRIMARY KEY,
    user_id      BIGINT      NOT NULL,
    amount_minor BIGINT      NOT NULL CHECK (amount_minor > 0),
    currency     TEXT        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    reference    TEXT,
    status       TEXT        NOT NULL DEFAULT 'pending_payment'
                 CHECK (status IN ('pending_payment', 'paid', 'partially_refunded', 'refunded')),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_orders_user_id ON orders (user_id, id);
