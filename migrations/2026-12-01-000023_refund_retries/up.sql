-- Merchant refunds that can neither pay twice nor stall (issue 23).
--
-- A request's automatic retries are paced and bounded:
--   attempts         provider calls whose outcome stayed unknown (409, 429, 5xx, timeout)
--   next_attempt_at  the recoverer calls again no earlier than this (exponential backoff), so a
--                    rate-limiting provider is not hammered and the queue round-robins
--   review_reason    set when the gateway stops retrying on its own: past
--                    `[refunds] max_retry_age_hours` (the provider may have forgotten its
--                    idempotency key, so a retry could refund twice), or an answer that cannot
--                    be stored. A person looks at the provider and resolves the request with
--                    POST /admin/refund-requests/{id}/resolve; until then it stays processing
--                    and its amount stays reserved.
ALTER TABLE refund_requests
    ADD COLUMN attempts        INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN review_reason   TEXT        NULL;

-- The recoverer's queue: processing requests it may still retry, due first.
CREATE INDEX idx_refund_requests_due ON refund_requests (next_attempt_at)
    WHERE status = 'processing' AND review_reason IS NULL;

-- GET /admin/attention also lists pending requests whose webhook is overdue: the attention
-- index now covers them (it is as small as the requests not yet final).
DROP INDEX idx_refund_requests_attention;
CREATE INDEX idx_refund_requests_attention ON refund_requests (updated_at DESC, id DESC)
    WHERE status IN ('failed', 'processing', 'pending');
