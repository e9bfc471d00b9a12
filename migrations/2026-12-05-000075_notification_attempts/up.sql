-- The failed attempts of each notification (docs/notifications.md, "Attempts"): when each was
-- stored, the answer's status or why there was none, for the merchant's portal. A success is
-- the notification's own row (delivered_at, last_status): an endpoint that answers at once,
-- the usual case, costs nothing here. Written by the sender's store in the statement that
-- stores the result (a late result that changes nothing writes nothing); deleted with its
-- notification. A redelivery keeps them: it starts the schedule's count again, not the history.
CREATE TABLE notification_attempts (
    id              BIGSERIAL   PRIMARY KEY,
    notification_id BIGINT      NOT NULL REFERENCES merchant_notifications (id) ON DELETE CASCADE,
    -- The attempt's number as its claim counted it (from 1 again after a redelivery).
    attempt         INT         NOT NULL,
    finished_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_code     INT,
    error           TEXT
);
CREATE INDEX idx_notification_attempts_notification ON notification_attempts (notification_id, id);
