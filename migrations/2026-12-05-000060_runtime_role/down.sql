-- The privileges go; the role stays: roles belong to the cluster, and other databases of it
-- may still grant it theirs (DROP ROLE would fail there). An operator drops it by hand.
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    REVOKE USAGE, SELECT ON SEQUENCES FROM callback_gateway_runtime;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM callback_gateway_runtime;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM callback_gateway_runtime;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM callback_gateway_runtime;
REVOKE USAGE ON SCHEMA public FROM callback_gateway_runtime;
