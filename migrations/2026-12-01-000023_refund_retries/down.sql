DROP INDEX idx_refund_requests_attention;
CREATE INDEX idx_refund_requests_attention ON refund_requests (updated_at DESC, id DESC)
    WHERE status IN ('failed', 'processing');
DROP INDEX idx_refund_requests_due;
ALTER TABLE refund_requests
    DROP COLUMN review_reason,
    DROP COLUMN next_attempt_at,
    DROP COLUMN attempts;
