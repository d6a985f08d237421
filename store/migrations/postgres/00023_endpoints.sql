-- Serverless endpoints (cloud.Endpoint) and their jobs (cloud.Job). An
-- endpoint's spec and status are JSON text. Endpoints are never deleted:
-- a deleted one keeps its row, with state 'deleted', for the audit, and
-- frees its name. A job's input and output are JSON text; finished jobs
-- are removed once their expires_at has passed.

-- +goose Up
CREATE TABLE endpoints (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text    NOT NULL,
    state           text    NOT NULL,
    spec            text    NOT NULL,
    status          text    NOT NULL,
    version         bigint NOT NULL,
    idempotency_key text    NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX endpoints_idempotency ON endpoints (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX endpoints_live_name ON endpoints (tenant_id, name) WHERE state <> 'deleted';
CREATE INDEX endpoints_state ON endpoints (state, id);

CREATE TABLE endpoint_jobs (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    endpoint_id     text COLLATE "C" NOT NULL REFERENCES endpoints (id),
    state           text    NOT NULL,
    input           text,
    output          text,
    error           text    NOT NULL,
    attempts        bigint NOT NULL,
    max_attempts    bigint NOT NULL,
    worker          text    NOT NULL,
    lease_owner     text    NOT NULL,
    lease_until timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    expires_at timestamptz,
    version         bigint NOT NULL,
    idempotency_key text    NOT NULL
);
CREATE UNIQUE INDEX endpoint_jobs_idempotency ON endpoint_jobs (endpoint_id, idempotency_key)
    WHERE idempotency_key <> '';
-- The queue: an endpoint's waiting and running jobs in arrival order.
CREATE INDEX endpoint_jobs_queue ON endpoint_jobs (endpoint_id, state, created_at, id);
CREATE INDEX endpoint_jobs_lease ON endpoint_jobs (lease_owner, state);
CREATE INDEX endpoint_jobs_expires ON endpoint_jobs (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE endpoint_jobs;
DROP TABLE endpoints;
