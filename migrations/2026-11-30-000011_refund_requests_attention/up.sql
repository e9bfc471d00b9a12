-- GET /admin/attention lists refund requests that failed or are processing (their lease may
-- have expired): newest first from this partial index, never a scan of every request.
CREATE INDEX idx_refund_requests_attention ON refund_requests (updated_at DESC, id DESC)
    WHERE status IN ('failed', 'processing');
