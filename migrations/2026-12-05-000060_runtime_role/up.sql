-- Two roles (issue 54): the role that runs these migrations owns the schema; the gateway serves
-- as a login role that is a member of `callback_gateway_runtime`, which owns nothing, so it can
-- never ALTER, DROP or TRUNCATE a table, nor disable the audit log's triggers (only an owner
-- may). It reads and writes rows; the audit log it may only append to and read.
--
-- The group role is created here when the cluster does not have it yet (that needs CREATEROLE;
-- deploy/roles.sql creates it beforehand, so an owner without CREATEROLE can migrate). Roles
-- belong to the cluster: two databases migrated at once may both try to create it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'callback_gateway_runtime') THEN
        CREATE ROLE callback_gateway_runtime NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

GRANT USAGE ON SCHEMA public TO callback_gateway_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO callback_gateway_runtime;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO callback_gateway_runtime;
-- Append and read only: UPDATE and DELETE are refused by the privilege itself, before the
-- append-only triggers of migration 000052 are reached.
REVOKE UPDATE, DELETE ON audit_log FROM callback_gateway_runtime;
-- Readiness reads which migrations ran; only the owner records them.
REVOKE INSERT, UPDATE, DELETE ON __diesel_schema_migrations FROM callback_gateway_runtime;

-- Tables and sequences the migrating role creates from now on (later migrations, the event
-- log's monthly partitions) get the same rows-only privileges. A table that needs less
-- revokes it in its own migration, as audit_log does above.
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO callback_gateway_runtime;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO callback_gateway_runtime;
