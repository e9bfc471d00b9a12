-- The finished rows of a merchant with an endpoint made by API were that endpoint's (the one a
-- merchant had until 000067; its rows before it existed went to the file's, which nothing
-- tells apart now): its list and a redelivery then name it. 10,000 rows a transaction, so no
-- lock is held for long and each batch's WAL is small.
DO $$
DECLARE
    v_moved INT;
BEGIN
    LOOP
        UPDATE merchant_notifications n SET endpoint_id = w.id
        FROM webhook_endpoints w
        WHERE n.id = ANY(ARRAY(
                SELECT m.id FROM merchant_notifications m
                JOIN webhook_endpoints x ON x.merchant_id = m.merchant_id
                WHERE m.endpoint_id = 'file' AND m.status <> 'pending'
                LIMIT 10000))
          AND w.merchant_id = n.merchant_id;
        GET DIAGNOSTICS v_moved = ROW_COUNT;
        COMMIT;
        EXIT WHEN v_moved = 0;
    END LOOP;
END
$$;
