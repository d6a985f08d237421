-- Idempotency keys for the creates that lacked them: volumes and addresses
-- are a tenant's, unique per (tenant, key) as instances, commitments and
-- spot requests are; price versions are the operator's, unique per key.
-- The empty key means the create was not idempotent, and never conflicts.

-- +goose Up
ALTER TABLE volumes ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX volumes_idempotency ON volumes (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
ALTER TABLE addresses ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX addresses_idempotency ON addresses (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
ALTER TABLE prices ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX prices_idempotency ON prices (idempotency_key)
    WHERE idempotency_key <> '';

-- +goose Down
DROP INDEX prices_idempotency;
ALTER TABLE prices DROP COLUMN idempotency_key;
DROP INDEX addresses_idempotency;
ALTER TABLE addresses DROP COLUMN idempotency_key;
DROP INDEX volumes_idempotency;
ALTER TABLE volumes DROP COLUMN idempotency_key;
