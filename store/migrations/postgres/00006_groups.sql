-- Autoscaling groups (cloud.Group), the metrics their policies read, and
-- the group controller's saved history of each group. A group's template,
-- policies, mix, timing, idle release (NULL when none) and status are json;
-- its budget is bigint micro-units. Groups are never deleted: a deleted
-- group keeps its row, with state 'deleted', for the audit, and frees its
-- name for a new live group of the tenant.
--
-- Instances gain the group they belong to ('' for none) and their
-- scale-in protection (cloud.ScaleIn, json; NULL when none).

-- +goose Up
CREATE TABLE groups (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    state           text NOT NULL,
    template        json NOT NULL,
    min_size        bigint NOT NULL,
    max_size        bigint NOT NULL,
    desired_size    bigint NOT NULL,
    policies        json NOT NULL,
    mixed           json NOT NULL,
    timing          json NOT NULL,
    budget_per_hour bigint NOT NULL,
    idle_release    json,
    status          json NOT NULL,
    version         bigint NOT NULL,
    idempotency_key text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX groups_idempotency ON groups (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX groups_live_name ON groups (tenant_id, name) WHERE state <> 'deleted';
CREATE INDEX groups_tenant ON groups (tenant_id, id);

-- Samples are appended and pruned by age, never updated; the bigserial
-- ID orders points of one time by insertion.
CREATE TABLE metric_points (
    id          bigserial NOT NULL PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    instance_id text COLLATE "C" NOT NULL,
    group_id    text COLLATE "C" NOT NULL,
    at          timestamptz NOT NULL,
    value       double precision NOT NULL
);
CREATE INDEX metric_points_at ON metric_points (at);
CREATE INDEX metric_points_group ON metric_points (tenant_id, group_id, at);

CREATE TABLE group_histories (
    group_id   text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES groups (id),
    doc        bytea NOT NULL,
    updated_at timestamptz NOT NULL
);

ALTER TABLE instances ADD COLUMN group_id text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN scale_in json;
CREATE INDEX instances_group ON instances (group_id) WHERE group_id <> '';

-- +goose Down
DROP INDEX instances_group;
ALTER TABLE instances DROP COLUMN scale_in;
ALTER TABLE instances DROP COLUMN group_id;
DROP TABLE group_histories;
DROP TABLE metric_points;
DROP TABLE groups;
