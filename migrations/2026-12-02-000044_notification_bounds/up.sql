-- What a disabled endpoint's merchant lost: beyond `[notifications] disabled_keep` pending
-- rows, the retention pass deletes the first due of them (the newest stay, each order's last
-- word among them) and counts them here, for the admin and the console. A constant default:
-- no rewrite of the table.
ALTER TABLE notification_endpoints
    ADD COLUMN dropped BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN last_dropped_at TIMESTAMPTZ;
