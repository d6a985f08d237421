-- The published ports whose requests keep their whole path, the
-- /v1/instances/{id}/ports/{port} prefix included
-- (cloud.Instance.PublishKeepPrefix; docs/ACCESS.md, "Published HTTP
-- ports"): a JSON array of port numbers, each one of publish, fixed at
-- create. Earlier instances keep none.

-- +goose Up
ALTER TABLE instances ADD COLUMN publish_keep_prefix json NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE instances DROP COLUMN publish_keep_prefix;
