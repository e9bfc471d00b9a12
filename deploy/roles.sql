-- The gateway's database roles (docs/deploying.md#two-database-roles). Run it as a superuser
-- (or a role with CREATEROLE and CREATEDB) on any database of the cluster; it is idempotent:
--
--   psql "postgres://postgres@db/postgres" -v owner=gateway_owner -v runtime=gateway \
--        -v database=gateway -f deploy/roles.sql
--
-- The three names default to gateway_owner, gateway and gateway. Passwords are yours to set
-- (`\password gateway_owner`, `\password gateway`), or use the cluster's own authentication.
\set ON_ERROR_STOP on
\if :{?owner}
\else
\set owner gateway_owner
\endif
\if :{?runtime}
\else
\set runtime gateway
\endif
\if :{?database}
\else
\set database gateway
\endif

-- The group the runtime role serves through: migration 000060 grants it rows (read, insert,
-- update, delete; the audit log only insert and read), never the ownership of anything.
SELECT 'CREATE ROLE callback_gateway_runtime NOLOGIN'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'callback_gateway_runtime') \gexec

-- Owns the database and everything the migrations create: [database] migrate_url.
SELECT format('CREATE ROLE %I LOGIN', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec

-- Serves: [database] url. It owns nothing, so it can neither change the schema nor disable
-- the audit log's triggers.
SELECT format('CREATE ROLE %I LOGIN', :'runtime')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'runtime') \gexec
SELECT format('GRANT callback_gateway_runtime TO %I', :'runtime') \gexec

SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'database') \gexec

-- In the database: the owner owns its schema, and nobody else may create in it (PostgreSQL 15
-- already refuses PUBLIC; earlier versions did not, and a table the runtime role created
-- would be its own).
\connect :"database"
SELECT format('ALTER SCHEMA public OWNER TO %I', :'owner') \gexec
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
