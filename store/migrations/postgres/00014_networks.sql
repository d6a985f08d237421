-- Private networks (issue 19): a tenant's networks, their subnets and
-- security groups (cloud.Network, cloud.Subnet, cloud.SecurityGroup).
--
-- Names are unique in their scope: a network's among its tenant's
-- networks, a subnet's and a group's among its network's. A tenant has at
-- most one default network, a network one default group and one default
-- subnet per zone. Deletes remove the row; subnets and groups refer to
-- their network, which cannot go while they are there.
--
-- A network's VNI is unique across the cloud and never given again, even
-- after its network is deleted: network_vnis holds the last VNI given, in
-- its one row, and CreateNetwork advances it in its own transaction.
--
-- A subnet keeps the IPAM cursor (ipam_cursor): the offset in its CIDR of
-- the next address to try. A group's rules are json lists.
--
-- Instances gain their network, subnet and security groups (a json list
-- of IDs). An address is held in its subnet until its instance
-- terminates: two instances of one subnet that are not terminated cannot
-- have the same private address.

-- +goose Up
CREATE TABLE network_vnis (
    id       integer NOT NULL PRIMARY KEY CHECK (id = 1),
    last_vni bigint  NOT NULL
);
INSERT INTO network_vnis (id, last_vni) VALUES (1, 0);

CREATE TABLE networks (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    cidr            text NOT NULL,
    vni             bigint NOT NULL,
    is_default      boolean NOT NULL,
    tags            json NOT NULL,
    idempotency_key text NOT NULL,
    version         bigint NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX networks_vni ON networks (vni);
CREATE UNIQUE INDEX networks_name ON networks (tenant_id, name);
CREATE UNIQUE INDEX networks_idempotency ON networks (tenant_id, idempotency_key) WHERE idempotency_key <> '';
CREATE UNIQUE INDEX networks_default ON networks (tenant_id) WHERE is_default;
CREATE INDEX networks_tenant ON networks (tenant_id, id);

CREATE TABLE subnets (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    network_id      text COLLATE "C" NOT NULL REFERENCES networks (id),
    name            text NOT NULL,
    cidr            text NOT NULL,
    zone            text NOT NULL,
    is_default      boolean NOT NULL,
    ipam_cursor     bigint NOT NULL,
    tags            json NOT NULL,
    idempotency_key text NOT NULL,
    version         bigint NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX subnets_name ON subnets (network_id, name);
CREATE UNIQUE INDEX subnets_idempotency ON subnets (tenant_id, idempotency_key) WHERE idempotency_key <> '';
CREATE UNIQUE INDEX subnets_default ON subnets (network_id, zone) WHERE is_default;
CREATE INDEX subnets_tenant ON subnets (tenant_id, id);

CREATE TABLE security_groups (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
    network_id      text COLLATE "C" NOT NULL REFERENCES networks (id),
    name            text NOT NULL,
    description     text NOT NULL,
    is_default      boolean NOT NULL,
    ingress         json NOT NULL,
    egress          json NOT NULL,
    tags            json NOT NULL,
    idempotency_key text NOT NULL,
    version         bigint NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX security_groups_name ON security_groups (network_id, name);
CREATE UNIQUE INDEX security_groups_idempotency ON security_groups (tenant_id, idempotency_key)
    WHERE idempotency_key <> '';
CREATE UNIQUE INDEX security_groups_default ON security_groups (network_id) WHERE is_default;
CREATE INDEX security_groups_tenant ON security_groups (tenant_id, id);

ALTER TABLE instances ADD COLUMN network_id text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN subnet_id text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN security_groups json NOT NULL DEFAULT '[]';
CREATE INDEX instances_network ON instances (network_id) WHERE network_id <> '';
CREATE INDEX instances_subnet ON instances (subnet_id) WHERE subnet_id <> '';
CREATE UNIQUE INDEX instances_subnet_address ON instances (subnet_id, private_address)
    WHERE subnet_id <> '' AND private_address <> '' AND state <> 'terminated';

-- +goose Down
DROP INDEX instances_subnet_address;
DROP INDEX instances_subnet;
DROP INDEX instances_network;
ALTER TABLE instances DROP COLUMN security_groups;
ALTER TABLE instances DROP COLUMN subnet_id;
ALTER TABLE instances DROP COLUMN network_id;
DROP TABLE security_groups;
DROP TABLE subnets;
DROP TABLE networks;
DROP TABLE network_vnis;
