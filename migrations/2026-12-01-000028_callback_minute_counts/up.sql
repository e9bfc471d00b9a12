-- The console's chart of callbacks per minute (issue 27) counted every delivery of the last
-- hour at each load: about a million rows at the benchmark's rate. The read-caches job
-- (src/deliveries/minutes.rs, one gateway at a time) now adds each delivery to a count once,
-- up to a settled position, and a read adds only the deliveries after it. Deliveries are never
-- updated or deleted, so a count stays right once added. Nothing on the callback path writes
-- here.

-- Deliveries per minute (since the Unix epoch) and outcome; the job keeps the last 3 hours.
CREATE TABLE callback_minute_counts (
    minute  BIGINT NOT NULL,
    outcome TEXT   NOT NULL,
    count   BIGINT NOT NULL CHECK (count > 0),
    PRIMARY KEY (minute, outcome)
);

-- The job's position (one row), as ledger_checkpoint_state's: every delivery with an id up to
-- through_delivery_id is counted; pending_* is the position noted by the last pass and the
-- transactions it waits for (src/settled.rs).
CREATE TABLE callback_minute_state (
    singleton           BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
    through_delivery_id BIGINT  NOT NULL DEFAULT 0,
    pending_delivery_id BIGINT  NULL,
    pending_writers     TEXT[]  NULL
);
INSERT INTO callback_minute_state DEFAULT VALUES;
