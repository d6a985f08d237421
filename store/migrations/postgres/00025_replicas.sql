-- Server replicas (docs/CONTROL_PLANE.md, "Several replicas"): each
-- replica writes its row every few seconds (heartbeat_at) with the
-- address its peers reach it at and its serverless gateway's load (JSON
-- text, opaque to the store), and the hosts whose agents hold a session
-- control channel to it (replica_hosts, replaced whole at each
-- heartbeat). A replica whose heartbeat is older than the TTL is gone:
-- readers skip it, and any replica's heartbeat deletes it.

-- +goose Up
CREATE TABLE replicas (
    id           text COLLATE "C" NOT NULL PRIMARY KEY,
    address      text NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    load         text NOT NULL DEFAULT ''
);
CREATE INDEX replicas_heartbeat ON replicas (heartbeat_at);

CREATE TABLE replica_hosts (
    replica_id text COLLATE "C" NOT NULL REFERENCES replicas (id) ON DELETE CASCADE,
    host_id    text COLLATE "C" NOT NULL,
    since      timestamptz NOT NULL,
    PRIMARY KEY (replica_id, host_id)
);

-- +goose Down
DROP TABLE replica_hosts;
DROP TABLE replicas;
