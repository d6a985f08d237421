-- Autoscaling groups (cloud.Group), the metrics their policies read, and
-- the group controller's saved history of each group. A group's template,
-- policies, mix, timing, idle release (NULL when none) and status are JSON
-- text; its budget is INTEGER micro-units. Groups are never deleted: a
-- deleted group keeps its row, with state 'deleted', for the audit, and
-- frees its name for a new live group of the tenant.
--
-- Instances gain the group they belong to ('' for none) and their
-- scale-in protection (cloud.ScaleIn, JSON; NULL when none).

-- +goose Up
CREATE TABLE groups (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    name            TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    template        TEXT    NOT NULL,
    min_size        INTEGER NOT NULL,
    max_size        INTEGER NOT NULL,
    desired_size    INTEGER NOT NULL,
    policies        TEXT    NOT NULL,
    mixed           TEXT    NOT NULL,
    timing          TEXT    NOT NULL,
    budget_per_hour INTEGER NOT NULL,
    idle_release    TEXT,
    status          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX groups_idempotency ON groups (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX groups_live_name ON groups (tenant_id, name) WHERE state <> 'deleted';
CREATE INDEX groups_tenant ON groups (tenant_id, id);

-- Samples are appended and pruned by age, never updated; AUTOINCREMENT
-- keeps IDs increasing, so that points of one time list in insertion
-- order.
CREATE TABLE metric_points (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    tenant_id   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    instance_id TEXT    NOT NULL,
    group_id    TEXT    NOT NULL,
    at          TEXT    NOT NULL,
    value       REAL    NOT NULL
) STRICT;
CREATE INDEX metric_points_at ON metric_points (at);
CREATE INDEX metric_points_group ON metric_points (tenant_id, group_id, at);

CREATE TABLE group_histories (
    group_id   TEXT NOT NULL PRIMARY KEY REFERENCES groups (id),
    doc        BLOB NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;

ALTER TABLE instances ADD COLUMN group_id TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN scale_in TEXT;
CREATE INDEX instances_group ON instances (group_id) WHERE group_id <> '';

-- +goose Down
DROP INDEX instances_group;
ALTER TABLE instances DROP COLUMN scale_in;
ALTER TABLE instances DROP COLUMN group_id;
DROP TABLE group_histories;
DROP TABLE metric_points;
DROP TABLE groups;
