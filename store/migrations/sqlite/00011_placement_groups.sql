-- Placement groups (cloud.PlacementGroup) keep their member instances
-- close (cluster: one NVLink island or rack fabric) or apart (spread). A
-- deleted group keeps its row with deleted_at set, for the audit, and frees
-- its name. Instances gain the placement group they belong to ('' for
-- none).

-- +goose Up
CREATE TABLE placement_groups (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    name            TEXT    NOT NULL,
    strategy        TEXT    NOT NULL,
    by_rack         INTEGER NOT NULL,
    tags            TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    deleted_at      TEXT
) STRICT;
CREATE UNIQUE INDEX placement_groups_idempotency ON placement_groups (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX placement_groups_live_name ON placement_groups (tenant_id, name) WHERE deleted_at IS NULL;
CREATE INDEX placement_groups_tenant ON placement_groups (tenant_id, id);

ALTER TABLE instances ADD COLUMN placement_group_id TEXT NOT NULL DEFAULT '';
CREATE INDEX instances_placement_group ON instances (placement_group_id) WHERE placement_group_id <> '';

-- +goose Down
DROP INDEX instances_placement_group;
ALTER TABLE instances DROP COLUMN placement_group_id;
DROP TABLE placement_groups;
