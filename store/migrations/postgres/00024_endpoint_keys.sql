-- Endpoint keys (cloud.EndpointKey): credentials a tenant makes for one of
-- its endpoints, to call it from apps. Only the SHA-256 of the whole key
-- string is kept, never the key. A revoked key keeps its row (revoked_at
-- set) for the audit. last_used_at is written at most once a minute per
-- key (service.Endpoints.KeyOf). A job records the key that submitted it
-- (key_id, '' for a user's token).

-- +goose Up
CREATE TABLE endpoint_keys (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    endpoint_id     text COLLATE "C" NOT NULL REFERENCES endpoints (id),
    name            text    NOT NULL,
    hash            bytea   NOT NULL UNIQUE,
    rate            bigint  NOT NULL,
    burst           bigint  NOT NULL,
    idempotency_key text    NOT NULL,
    created_at timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at timestamptz
);
CREATE UNIQUE INDEX endpoint_keys_idempotency ON endpoint_keys (endpoint_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX endpoint_keys_endpoint ON endpoint_keys (tenant_id, endpoint_id, id);

ALTER TABLE endpoint_jobs ADD COLUMN key_id text COLLATE "C" NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE endpoint_jobs DROP COLUMN key_id;
DROP TABLE endpoint_keys;
