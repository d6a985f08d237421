-- Spot requests gain the private network of their launches
-- (cloud.SpotRequest.Subnet and SecurityGroups, a json list of IDs), as
-- the request asked for them. '' and '[]' are the tenant's default subnet
-- and its network's default group, so rows written before keep their
-- meaning.

-- +goose Up
ALTER TABLE spot_requests ADD COLUMN subnet_id TEXT NOT NULL DEFAULT '';
ALTER TABLE spot_requests ADD COLUMN security_groups TEXT NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE spot_requests DROP COLUMN security_groups;
ALTER TABLE spot_requests DROP COLUMN subnet_id;
