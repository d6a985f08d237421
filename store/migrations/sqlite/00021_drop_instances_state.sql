-- instances_state (state) is a prefix of instances_counts (state, offering,
-- market, tenant_id), which serves every query by state as well; each
-- instance insert and each change of state kept both up to date.

-- +goose Up
DROP INDEX instances_state;

-- +goose Down
CREATE INDEX instances_state ON instances (state);
