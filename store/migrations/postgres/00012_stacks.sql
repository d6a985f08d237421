-- Stacks (issue 11) and what they need of the resources they create.
--
-- Instances gain their private address: the one their host's agent gave
-- them on the instance network ('' until the agent reports it), which a
-- stack's instances use to find each other.
--
-- Volumes, addresses, groups and commitments gain tags (json objects), as
-- instances, spot requests and placement groups have, so that every
-- resource a stack creates carries gpucloud:stack=NAME.
--
-- A stack (cloud.Stack) keeps its template's source, the parameters and
-- the state the stack engine records (json: each resource copy with its
-- ID and the properties applied, and the steps under way), its outputs and
-- its state. A destroyed stack keeps its row, state 'destroyed', and frees
-- its name. Stack events are appended, never updated.

-- +goose Up
ALTER TABLE instances ADD COLUMN private_address text NOT NULL DEFAULT '';
ALTER TABLE volumes ADD COLUMN tags json NOT NULL DEFAULT '{}';
ALTER TABLE addresses ADD COLUMN tags json NOT NULL DEFAULT '{}';
ALTER TABLE groups ADD COLUMN tags json NOT NULL DEFAULT '{}';
ALTER TABLE commitments ADD COLUMN tags json NOT NULL DEFAULT '{}';

CREATE TABLE stacks (
    id          text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    state       text NOT NULL,
    template    text NOT NULL,
    parameters  json NOT NULL,
    applied     json NOT NULL,
    outputs     json NOT NULL,
    reason      text NOT NULL,
    version     bigint  NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE UNIQUE INDEX stacks_live_name ON stacks (tenant_id, name) WHERE state <> 'destroyed';
CREATE INDEX stacks_tenant ON stacks (tenant_id, id);
CREATE INDEX stacks_in_progress ON stacks (state) WHERE state IN ('applying', 'destroying');

CREATE TABLE stack_events (
    id        bigserial NOT NULL PRIMARY KEY,
    stack_id  text COLLATE "C" NOT NULL REFERENCES stacks (id),
    time      timestamptz NOT NULL,
    address   text NOT NULL,
    action    text NOT NULL,
    outcome   text NOT NULL,
    resource  text NOT NULL,
    message   text NOT NULL
);
CREATE INDEX stack_events_stack ON stack_events (stack_id, id);

-- +goose Down
DROP TABLE stack_events;
DROP TABLE stacks;
ALTER TABLE commitments DROP COLUMN tags;
ALTER TABLE groups DROP COLUMN tags;
ALTER TABLE addresses DROP COLUMN tags;
ALTER TABLE volumes DROP COLUMN tags;
ALTER TABLE instances DROP COLUMN private_address;
