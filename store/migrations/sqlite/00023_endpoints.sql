-- Serverless endpoints (cloud.Endpoint) and their jobs (cloud.Job). An
-- endpoint's spec and status are JSON text. Endpoints are never deleted:
-- a deleted one keeps its row, with state 'deleted', for the audit, and
-- frees its name. A job's input and output are JSON text; finished jobs
-- are removed once their expires_at has passed.

-- +goose Up
CREATE TABLE endpoints (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    name            TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    spec            TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX endpoints_idempotency ON endpoints (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX endpoints_live_name ON endpoints (tenant_id, name) WHERE state <> 'deleted';
CREATE INDEX endpoints_state ON endpoints (state, id);

CREATE TABLE endpoint_jobs (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    endpoint_id     TEXT    NOT NULL REFERENCES endpoints (id),
    state           TEXT    NOT NULL,
    input           TEXT,
    output          TEXT,
    error           TEXT    NOT NULL,
    attempts        INTEGER NOT NULL,
    max_attempts    INTEGER NOT NULL,
    worker          TEXT    NOT NULL,
    lease_owner     TEXT    NOT NULL,
    lease_until     TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    started_at      TEXT,
    finished_at     TEXT,
    expires_at      TEXT,
    version         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX endpoint_jobs_idempotency ON endpoint_jobs (endpoint_id, idempotency_key)
    WHERE idempotency_key <> '';
-- The queue: an endpoint's waiting and running jobs in arrival order.
CREATE INDEX endpoint_jobs_queue ON endpoint_jobs (endpoint_id, state, created_at, id);
CREATE INDEX endpoint_jobs_lease ON endpoint_jobs (lease_owner, state);
CREATE INDEX endpoint_jobs_expires ON endpoint_jobs (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE endpoint_jobs;
DROP TABLE endpoints;
