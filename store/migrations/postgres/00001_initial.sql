-- The initial schema of the PostgreSQL backend. Identifiers use the "C"
-- collation so that ORDER BY id and paging with id > $n follow byte order,
-- as in SQLite and Go, whatever the database's locale. Times are timestamptz
-- (microsecond precision). Lists, maps and documents are json rather than
-- jsonb: json keeps the text exactly as written, so event details round-trip
-- byte for byte, and still lets operators query them with ->> when needed.

-- +goose Up
CREATE TABLE tenants (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE users (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name       text NOT NULL,
    role       text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE tokens (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    user_id    text COLLATE "C" NOT NULL REFERENCES users (id),
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
    role       text NOT NULL,
    name       text NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX tokens_tenant ON tokens (tenant_id);

CREATE TABLE quotas (
    tenant_id text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES tenants (id),
    instances bigint NOT NULL,
    gpus      json NOT NULL
);

CREATE TABLE instances (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    offering        text NOT NULL,
    state           text NOT NULL,
    reason          text NOT NULL,
    version         bigint NOT NULL,
    idempotency_key text NOT NULL,
    zones           json NOT NULL,
    labels          json NOT NULL,
    command         json NOT NULL,
    env             json NOT NULL,
    volumes         json NOT NULL,
    tags            json NOT NULL,
    host_id         text COLLATE "C" NOT NULL,
    placement       json,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX instances_idempotency ON instances (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX instances_tenant ON instances (tenant_id, id);
CREATE INDEX instances_state ON instances (state);
CREATE INDEX instances_host ON instances (host_id);

CREATE TABLE hosts (
    id             text COLLATE "C" NOT NULL PRIMARY KEY,
    state          text NOT NULL,
    spec           json NOT NULL,
    last_heartbeat timestamptz NOT NULL,
    version        bigint NOT NULL
);

CREATE TABLE volumes (
    id          text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    size_gib    bigint NOT NULL,
    zone        text NOT NULL,
    instance_id text COLLATE "C" REFERENCES instances (id),
    created_at  timestamptz NOT NULL,
    deleted_at  timestamptz
);
CREATE INDEX volumes_tenant ON volumes (tenant_id);
CREATE INDEX volumes_instance ON volumes (instance_id);

CREATE TABLE events (
    id          bigserial NOT NULL PRIMARY KEY,
    at          timestamptz NOT NULL,
    kind        text NOT NULL,
    tenant_id   text COLLATE "C" NOT NULL,
    instance_id text COLLATE "C" NOT NULL,
    host_id     text COLLATE "C" NOT NULL,
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    reason      text NOT NULL,
    actor       text NOT NULL,
    details     json
);
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
