ALTER TABLE orders RESET (fillfactor);
