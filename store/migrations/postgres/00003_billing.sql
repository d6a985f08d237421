-- Pricing, the spot market and billing. Money is bigint micro-units
-- (money.Micros); times are timestamptz; lists and maps are json. Instances
-- gain the zone they were last placed in, their market, their spot request
-- and the interruption announced to them (NULL when none).
--
-- The usage ledger (usage) is written by the store itself, in the
-- transaction of the change it meters: on_ is true when the resource starts
-- accruing at the time, false when it stops.

-- +goose Up
ALTER TABLE instances ADD COLUMN zone text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN market text NOT NULL DEFAULT 'on_demand';
ALTER TABLE instances ADD COLUMN spot_request_id text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN interruption json;
CREATE INDEX instances_spot_request ON instances (spot_request_id) WHERE spot_request_id <> '';

CREATE TABLE prices (
    id           bigserial NOT NULL PRIMARY KEY,
    kind         text COLLATE "C" NOT NULL,
    offering     text COLLATE "C" NOT NULL,
    zone         text COLLATE "C" NOT NULL,
    amount       bigint NOT NULL,
    effective_at timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    actor        text NOT NULL
);
CREATE INDEX prices_key ON prices (kind, offering, zone, effective_at);

CREATE TABLE commitments (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    plan            text NOT NULL,
    offering        text COLLATE "C" NOT NULL,
    zone            text COLLATE "C" NOT NULL,
    quantity        bigint NOT NULL,
    payment         text NOT NULL,
    discount_bp     bigint NOT NULL,
    upfront_fee     bigint NOT NULL,
    hourly_fee      bigint NOT NULL,
    usage_rate      bigint NOT NULL,
    starts_at       timestamptz NOT NULL,
    ends_at         timestamptz NOT NULL,
    created_at      timestamptz NOT NULL,
    idempotency_key text NOT NULL
);
CREATE UNIQUE INDEX commitments_idempotency ON commitments (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX commitments_tenant ON commitments (tenant_id, id);

CREATE TABLE spot_requests (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    type            text NOT NULL,
    max_price       bigint NOT NULL,
    interruption    text NOT NULL,
    pools           json NOT NULL,
    state           text NOT NULL,
    reason          text NOT NULL,
    instance_id     text COLLATE "C" NOT NULL,
    launches        bigint NOT NULL,
    command         json NOT NULL,
    env             json NOT NULL,
    volumes         json NOT NULL,
    tags            json NOT NULL,
    version         bigint NOT NULL,
    idempotency_key text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX spot_requests_idempotency ON spot_requests (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX spot_requests_tenant ON spot_requests (tenant_id, id);
CREATE INDEX spot_requests_state ON spot_requests (state);

-- One point per pool and time: the price from then until the next point.
CREATE TABLE spot_prices (
    offering text COLLATE "C" NOT NULL,
    zone     text COLLATE "C" NOT NULL,
    at       timestamptz NOT NULL,
    price    bigint NOT NULL,
    PRIMARY KEY (offering, zone, at)
);
CREATE INDEX spot_prices_at ON spot_prices (at);

CREATE TABLE addresses (
    id          text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL REFERENCES tenants (id),
    ip          text NOT NULL,
    zone        text COLLATE "C" NOT NULL,
    instance_id text COLLATE "C" REFERENCES instances (id),
    created_at  timestamptz NOT NULL,
    released_at timestamptz
);
CREATE UNIQUE INDEX addresses_ip ON addresses (ip) WHERE released_at IS NULL;
CREATE INDEX addresses_tenant ON addresses (tenant_id, id);

CREATE TABLE usage (
    id          bigserial NOT NULL PRIMARY KEY,
    at          timestamptz NOT NULL,
    tenant_id   text COLLATE "C" NOT NULL,
    kind        text NOT NULL,
    resource_id text COLLATE "C" NOT NULL,
    on_         boolean NOT NULL,
    offering    text COLLATE "C" NOT NULL,
    zone        text COLLATE "C" NOT NULL,
    market      text NOT NULL,
    quantity    bigint NOT NULL,
    event_id    bigint NOT NULL
);
CREATE INDEX usage_tenant ON usage (tenant_id, at);
CREATE INDEX usage_resource ON usage (resource_id, id);

CREATE TABLE budgets (
    tenant_id  text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES tenants (id),
    amount     bigint NOT NULL,
    thresholds json NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE budget_alerts (
    tenant_id text COLLATE "C" NOT NULL REFERENCES tenants (id),
    month     text COLLATE "C" NOT NULL,
    threshold bigint NOT NULL,
    spent     bigint NOT NULL,
    at        timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, month, threshold)
);

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
