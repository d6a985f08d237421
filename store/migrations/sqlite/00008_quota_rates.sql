-- Quotas gain a cap on each GPU model without its own entry in gpus
-- (cloud.Quota.GPUsPerModel; new tenants start with one) and the request
-- rate of the tenant's users (requests per second and burst of a token
-- bucket). 0 is no cap, and for the rate the server's default, so rows
-- written before keep their meaning.
--
-- A covering index for a tenant's count of instances by state, offering
-- and market (Tx.CountTenantInstances): what every create under a quota
-- counts, without reading the rows.

-- +goose Up
ALTER TABLE quotas ADD COLUMN gpus_per_model      REAL    NOT NULL DEFAULT 0;
ALTER TABLE quotas ADD COLUMN requests_per_second INTEGER NOT NULL DEFAULT 0;
ALTER TABLE quotas ADD COLUMN burst               INTEGER NOT NULL DEFAULT 0;

CREATE INDEX instances_tenant_counts ON instances (tenant_id, state, offering, market);

-- +goose Down
DROP INDEX instances_tenant_counts;
ALTER TABLE quotas DROP COLUMN burst;
ALTER TABLE quotas DROP COLUMN requests_per_second;
ALTER TABLE quotas DROP COLUMN gpus_per_model;
