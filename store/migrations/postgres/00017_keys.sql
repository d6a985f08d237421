-- A tenant's SSH public keys (cloud.Key), which may open SSH sessions to
-- its instances. Only the public half is stored. A deleted key's row is
-- removed: it must never authorize a session again.

-- +goose Up
CREATE TABLE ssh_keys (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    public_key      text NOT NULL,
    key_type        text NOT NULL,
    bits            integer NOT NULL,
    fingerprint     text COLLATE "C" NOT NULL,
    idempotency_key text NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX ssh_keys_idempotency ON ssh_keys (tenant_id, idempotency_key) WHERE idempotency_key <> '';
CREATE UNIQUE INDEX ssh_keys_name ON ssh_keys (tenant_id, name);
CREATE UNIQUE INDEX ssh_keys_fingerprint ON ssh_keys (tenant_id, fingerprint);

-- +goose Down
DROP TABLE ssh_keys;
