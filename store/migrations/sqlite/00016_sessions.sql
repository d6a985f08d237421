-- Interactive sessions into instances (issue 20, docs/ACCESS.md): one row
-- per exec, port forward, SSH session or file copy, written when it
-- starts and closed (ended_at, exit_code, end_reason) when it ends. A
-- session left open by a server that stopped is closed by the next one
-- with the reason "server restarted": replica names the server that
-- relays it, so that a replica's restart closes only its own. exit_code is NULL when no exit
-- status came back.

-- +goose Up
CREATE TABLE sessions (
    id          TEXT NOT NULL PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    instance_id TEXT NOT NULL REFERENCES instances (id),
    user_id     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    command     TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    exit_code   INTEGER,
    end_reason  TEXT NOT NULL DEFAULT '',
    replica     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_open_user ON sessions (user_id) WHERE ended_at IS NULL;
CREATE INDEX sessions_instance ON sessions (instance_id, id);

-- +goose Down
DROP TABLE sessions;
