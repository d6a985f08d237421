-- A covering index for the metrics' count of instances by state,
-- offering, market and tenant (Tx.CountInstances): each scrape reads the
-- index in its order, never the rows, and needs no sort.

-- +goose Up
CREATE INDEX instances_counts ON instances (state, offering, market, tenant_id);

-- +goose Down
DROP INDEX instances_counts;
