-- Indexes for the spot market's statistics: reclaim events by kind and
-- time, and the usage ledger by time across tenants (the open entries at a
-- window's start, and the window itself).

-- +goose Up
CREATE INDEX events_kind_at ON events (kind, at);
CREATE INDEX usage_at ON usage (at);

-- +goose Down
DROP INDEX usage_at;
DROP INDEX events_kind_at;
