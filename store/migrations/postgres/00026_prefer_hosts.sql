-- The hosts an instance's placement prefers among equally good ones
-- (cloud.Instance.PreferHosts, placement.Request.Prefer): a JSON array of
-- host IDs, the most preferred first, fixed at create. An endpoint's
-- worker prefers the hosts where the endpoint last ran (its image is
-- cached there). Earlier instances prefer none.

-- +goose Up
ALTER TABLE instances ADD COLUMN prefer_hosts json NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE instances DROP COLUMN prefer_hosts;
