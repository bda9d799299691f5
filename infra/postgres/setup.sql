-- rote's PostgreSQL event store: a login role, a database, and a schema the role owns.
-- Run once, as a superuser (or a role with CREATEROLE and CREATEDB):
--
--   psql "postgresql://postgres@db.example.internal:5432/postgres" \
--     -v role=rote -v password="$ROTE_PG_PASSWORD" -v dbname=rote -v schema=rote \
--     -f infra/postgres/setup.sql
--
-- then point every compiler and scheduler process at it:
--
--   ROTE_EVENT_STORE=postgresql://rote:<password>@db.example.internal:5432/rote?schema=rote
--
-- rote creates its own tables (compiler_* and scheduler_*) in that schema when the
-- compiler and the scheduler start, so the role needs to own the schema; it needs no
-- other privilege, and no superuser.

\set ON_ERROR_STOP on

CREATE ROLE :"role" LOGIN PASSWORD :'password';

-- template0 with UTF8, so the database does not inherit whatever template1 holds.
CREATE DATABASE :"dbname" OWNER :"role" ENCODING 'UTF8' TEMPLATE template0;

\connect :"dbname"

CREATE SCHEMA :"schema" AUTHORIZATION :"role";

-- Nobody else gets to create objects in this database's public schema.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- psql sessions as the role land in rote's schema (rote itself names it explicitly).
ALTER ROLE :"role" IN DATABASE :"dbname" SET search_path = :"schema";
