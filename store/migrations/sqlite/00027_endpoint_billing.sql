-- Endpoint workers bill under their endpoint (docs/BILLING.md): an
-- instance records the serverless endpoint it is a worker of, and each
-- compute entry of the usage ledger the endpoint of its instance. Both are
-- filled in for the workers made before, from the gpucloud:endpoint tag
-- they carry.

-- +goose Up
ALTER TABLE instances ADD COLUMN endpoint_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN endpoint_id TEXT NOT NULL DEFAULT '';
UPDATE instances SET endpoint_id = json_extract(tags, '$."gpucloud:endpoint"')
    WHERE json_valid(tags) AND json_type(tags, '$."gpucloud:endpoint"') = 'text';
UPDATE usage SET endpoint_id = (SELECT i.endpoint_id FROM instances i WHERE i.id = usage.resource_id)
    WHERE kind = 'compute'
      AND EXISTS (SELECT 1 FROM instances i WHERE i.id = usage.resource_id AND i.endpoint_id <> '');

-- +goose Down
ALTER TABLE usage DROP COLUMN endpoint_id;
ALTER TABLE instances DROP COLUMN endpoint_id;
