-- Pricing, the spot market and billing. Money is INTEGER micro-units
-- (money.Micros); times are TEXT in the fixed-width UTC layout of 00001;
-- lists and maps are JSON text. Instances gain the zone they were last
-- placed in, their market, their spot request and the interruption
-- announced to them (JSON, NULL when none).
--
-- The usage ledger (usage) is written by the store itself, in the
-- transaction of the change it meters: on_ is 1 when the resource starts
-- accruing at the time, 0 when it stops.

-- +goose Up
ALTER TABLE instances ADD COLUMN zone TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN market TEXT NOT NULL DEFAULT 'on_demand';
ALTER TABLE instances ADD COLUMN spot_request_id TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN interruption TEXT;
CREATE INDEX instances_spot_request ON instances (spot_request_id) WHERE spot_request_id <> '';

-- Price versions are never updated or deleted; AUTOINCREMENT keeps IDs
-- increasing.
CREATE TABLE prices (
    id           INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,
    offering     TEXT    NOT NULL,
    zone         TEXT    NOT NULL,
    amount       INTEGER NOT NULL,
    effective_at TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    actor        TEXT    NOT NULL
) STRICT;
CREATE INDEX prices_key ON prices (kind, offering, zone, effective_at);

CREATE TABLE commitments (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    plan            TEXT    NOT NULL,
    offering        TEXT    NOT NULL,
    zone            TEXT    NOT NULL,
    quantity        INTEGER NOT NULL,
    payment         TEXT    NOT NULL,
    discount_bp     INTEGER NOT NULL,
    upfront_fee     INTEGER NOT NULL,
    hourly_fee      INTEGER NOT NULL,
    usage_rate      INTEGER NOT NULL,
    starts_at       TEXT    NOT NULL,
    ends_at         TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX commitments_idempotency ON commitments (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX commitments_tenant ON commitments (tenant_id, id);

CREATE TABLE spot_requests (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL REFERENCES tenants (id),
    name            TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    max_price       INTEGER NOT NULL,
    interruption    TEXT    NOT NULL,
    pools           TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    instance_id     TEXT    NOT NULL,
    launches        INTEGER NOT NULL,
    command         TEXT    NOT NULL,
    env             TEXT    NOT NULL,
    volumes         TEXT    NOT NULL,
    tags            TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX spot_requests_idempotency ON spot_requests (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX spot_requests_tenant ON spot_requests (tenant_id, id);
CREATE INDEX spot_requests_state ON spot_requests (state);

-- One point per pool and time: the price from then until the next point.
CREATE TABLE spot_prices (
    offering TEXT    NOT NULL,
    zone     TEXT    NOT NULL,
    at       TEXT    NOT NULL,
    price    INTEGER NOT NULL,
    PRIMARY KEY (offering, zone, at)
) STRICT;
CREATE INDEX spot_prices_at ON spot_prices (at);

CREATE TABLE addresses (
    id          TEXT NOT NULL PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    ip          TEXT NOT NULL,
    zone        TEXT NOT NULL,
    instance_id TEXT REFERENCES instances (id),
    created_at  TEXT NOT NULL,
    released_at TEXT
) STRICT;
CREATE UNIQUE INDEX addresses_ip ON addresses (ip) WHERE released_at IS NULL;
CREATE INDEX addresses_tenant ON addresses (tenant_id, id);

CREATE TABLE usage (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at          TEXT    NOT NULL,
    tenant_id   TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    resource_id TEXT    NOT NULL,
    on_         INTEGER NOT NULL,
    offering    TEXT    NOT NULL,
    zone        TEXT    NOT NULL,
    market      TEXT    NOT NULL,
    quantity    INTEGER NOT NULL,
    event_id    INTEGER NOT NULL
) STRICT;
CREATE INDEX usage_tenant ON usage (tenant_id, at);
CREATE INDEX usage_resource ON usage (resource_id, id);

CREATE TABLE budgets (
    tenant_id  TEXT    NOT NULL PRIMARY KEY REFERENCES tenants (id),
    amount     INTEGER NOT NULL,
    thresholds TEXT    NOT NULL,
    updated_at TEXT    NOT NULL
) STRICT;

CREATE TABLE budget_alerts (
    tenant_id TEXT    NOT NULL REFERENCES tenants (id),
    month     TEXT    NOT NULL,
    threshold INTEGER NOT NULL,
    spent     INTEGER NOT NULL,
    at        TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, month, threshold)
) STRICT;

-- +goose Down
DROP TABLE budget_alerts;
DROP TABLE budgets;
DROP TABLE usage;
DROP TABLE addresses;
DROP TABLE spot_prices;
DROP TABLE spot_requests;
DROP TABLE commitments;
DROP TABLE prices;
DROP INDEX instances_spot_request;
ALTER TABLE instances DROP COLUMN interruption;
ALTER TABLE instances DROP COLUMN spot_request_id;
ALTER TABLE instances DROP COLUMN market;
ALTER TABLE instances DROP COLUMN zone;
