-- The initial schema of the SQLite backend. Times are TEXT in the fixed-width
-- layout 2006-01-02T15:04:05.000000Z (UTC, microseconds), so that comparing
-- them as strings orders them in time; lists, maps and JSON documents are
-- JSON text. STRICT tables make SQLite reject a value of the wrong type
-- instead of silently storing it.

-- +goose Up
CREATE TABLE tenants (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE users (
    id         TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE tokens (
    id         TEXT NOT NULL PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users (id),
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    role       TEXT NOT NULL,
    name       TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
) STRICT;
CREATE INDEX tokens_tenant ON tokens (tenant_id);

CREATE TABLE quotas (
    tenant_id TEXT    NOT NULL PRIMARY KEY REFERENCES tenants (id),
    instances INTEGER NOT NULL,
    gpus      TEXT    NOT NULL
) STRICT;

CREATE TABLE instances (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    name            TEXT    NOT NULL,
    offering        TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL,
    zones           TEXT    NOT NULL,
    labels          TEXT    NOT NULL,
    command         TEXT    NOT NULL,
    env             TEXT    NOT NULL,
    volumes         TEXT    NOT NULL,
    tags            TEXT    NOT NULL,
    host_id         TEXT    NOT NULL,
    placement       TEXT,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX instances_idempotency ON instances (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX instances_tenant ON instances (tenant_id, id);
CREATE INDEX instances_state ON instances (state);
CREATE INDEX instances_host ON instances (host_id);

CREATE TABLE hosts (
    id             TEXT    NOT NULL PRIMARY KEY,
    state          TEXT    NOT NULL,
    spec           TEXT    NOT NULL,
    last_heartbeat TEXT    NOT NULL,
    version        INTEGER NOT NULL
) STRICT;

CREATE TABLE volumes (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant_id   TEXT    NOT NULL REFERENCES tenants (id),
    name        TEXT    NOT NULL,
    size_gib    INTEGER NOT NULL,
    zone        TEXT    NOT NULL,
    instance_id TEXT REFERENCES instances (id),
    created_at  TEXT    NOT NULL,
    deleted_at  TEXT
) STRICT;
CREATE INDEX volumes_tenant ON volumes (tenant_id);
CREATE INDEX volumes_instance ON volumes (instance_id);

-- AUTOINCREMENT guarantees that an event ID is never reused, even after the
-- newest events are deleted, so IDs only ever increase.
CREATE TABLE events (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at          TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    tenant_id   TEXT    NOT NULL,
    instance_id TEXT    NOT NULL,
    host_id     TEXT    NOT NULL,
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    actor       TEXT    NOT NULL,
    details     TEXT
) STRICT;
CREATE INDEX events_instance ON events (instance_id, id);
CREATE INDEX events_host ON events (host_id, id);
CREATE INDEX events_tenant ON events (tenant_id, id);

-- +goose Down
DROP TABLE events;
DROP TABLE volumes;
DROP TABLE hosts;
DROP TABLE instances;
DROP TABLE quotas;
DROP TABLE tokens;
DROP TABLE users;
DROP TABLE tenants;
