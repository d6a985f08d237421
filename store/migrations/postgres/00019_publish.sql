-- The TCP ports an instance publishes as HTTP through the server
-- (cloud.Instance.Publish; docs/ACCESS.md, "Published HTTP ports"): a JSON
-- array of port numbers, fixed at create. Earlier instances publish none.

-- +goose Up
ALTER TABLE instances ADD COLUMN publish json NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE instances DROP COLUMN publish;
