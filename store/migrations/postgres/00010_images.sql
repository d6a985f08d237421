-- Instances and spot requests gain the OCI image their workload runs in
-- (cloud.Instance.Image, cloud.SpotRequest.Image), in canonical form
-- ("docker.io/library/python:3.12"). '' is the operator's default image
-- of the host, so rows written before keep their meaning. Groups keep
-- theirs in the template (JSON) already.

-- +goose Up
ALTER TABLE instances ADD COLUMN image text NOT NULL DEFAULT '';
ALTER TABLE spot_requests ADD COLUMN image text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE spot_requests DROP COLUMN image;
ALTER TABLE instances DROP COLUMN image;
