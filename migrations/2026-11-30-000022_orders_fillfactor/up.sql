-- Every order is updated at least once (pending_payment -> paid), and the status is in no
-- index: with room left on its page the update is HOT and writes no index entry, where a full
-- page costs an entry in each of the table's two indexes. Applies to pages written from now on.
ALTER TABLE orders SET (fillfactor = 85);
