-- PayPal signs `{transmission id}|{time}|{webhook id}|{CRC-32 of the body}`. CRC-32 is no MAC:
-- with one genuine delivery's headers, anyone can write another body with the same CRC-32, and
-- the signature verifies it too. So a transmission id is good for one body only: the first
-- verified body under an id is bound to it here, a redelivery of that body passes, and another
-- body under the same id is refused (401) and counted, for /admin/attention. A row is needed
-- only while its transmission time is still accepted (`valid_until`: the time plus the
-- provider's retry window); the expiry pass deletes it after that, and keeps a row that saw a
-- forgery 30 days longer so finance can look at it (docs/providers-paypal.md).
CREATE TABLE provider_transmissions (
    provider TEXT NOT NULL,
    transmission_id TEXT NOT NULL,
    merchant_id BIGINT NOT NULL,
    -- SHA-256 of the first verified body (hex), and the event id it named.
    body_sha256 TEXT NOT NULL,
    event_id TEXT NOT NULL,
    valid_until TIMESTAMPTZ NOT NULL,
    first_seen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Other bodies refused under this id: how many, the latest one's hash and event id.
    conflicts INT NOT NULL DEFAULT 0,
    last_conflict_at TIMESTAMPTZ,
    last_conflict_sha256 TEXT,
    last_conflict_event_id TEXT,
    PRIMARY KEY (provider, transmission_id)
);

-- The expiry pass, oldest first.
CREATE INDEX idx_provider_transmissions_expiry ON provider_transmissions (valid_until);
-- /admin/attention: transmissions that saw another body, newest first. Empty until one does.
CREATE INDEX idx_provider_transmissions_conflicts ON provider_transmissions (last_conflict_at DESC)
    WHERE conflicts > 0;
