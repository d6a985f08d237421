-- Endpoint workers bill under their endpoint (docs/BILLING.md): an
-- instance records the serverless endpoint it is a worker of, and each
-- compute entry of the usage ledger the endpoint of its instance. Both are
-- filled in for the workers made before, from the gpucloud:endpoint tag
-- they carry.

-- +goose Up
ALTER TABLE instances ADD COLUMN endpoint_id text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN endpoint_id text COLLATE "C" NOT NULL DEFAULT '';
UPDATE instances SET endpoint_id = tags::jsonb ->> 'gpucloud:endpoint'
    WHERE jsonb_typeof(tags::jsonb -> 'gpucloud:endpoint') = 'string';
UPDATE usage u SET endpoint_id = i.endpoint_id FROM instances i
    WHERE u.kind = 'compute' AND i.id = u.resource_id AND i.endpoint_id <> '';

-- +goose Down
ALTER TABLE usage DROP COLUMN endpoint_id;
ALTER TABLE instances DROP COLUMN endpoint_id;
