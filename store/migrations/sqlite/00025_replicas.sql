-- Server replicas (docs/CONTROL_PLANE.md, "Several replicas"): each
-- replica writes its row every few seconds (heartbeat_at) with the
-- address its peers reach it at and its serverless gateway's load (JSON
-- text, opaque to the store), and the hosts whose agents hold a session
-- control channel to it (replica_hosts, replaced whole at each
-- heartbeat). A replica whose heartbeat is older than the TTL is gone:
-- readers skip it, and any replica's heartbeat deletes it.

-- +goose Up
CREATE TABLE replicas (
    id           TEXT NOT NULL PRIMARY KEY,
    address      TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    load         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX replicas_heartbeat ON replicas (heartbeat_at);

CREATE TABLE replica_hosts (
    replica_id TEXT NOT NULL REFERENCES replicas (id) ON DELETE CASCADE,
    host_id    TEXT NOT NULL,
    since      TEXT NOT NULL,
    PRIMARY KEY (replica_id, host_id)
);

-- +goose Down
DROP TABLE replica_hosts;
DROP TABLE replicas;
