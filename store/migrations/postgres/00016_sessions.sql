-- Interactive sessions into instances (issue 20, docs/ACCESS.md): one row
-- per exec, port forward, SSH session or file copy, written when it
-- starts and closed (ended_at, exit_code, end_reason) when it ends. A
-- session left open by a server that stopped is closed by the next one
-- with the reason "server restarted": replica names the server that
-- relays it, so that a replica's restart closes only its own. exit_code is NULL when no exit
-- status came back.

-- +goose Up
CREATE TABLE sessions (
    id          text COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL REFERENCES tenants (id),
    instance_id text COLLATE "C" NOT NULL REFERENCES instances (id),
    user_id     text NOT NULL,
    kind        text NOT NULL,
    command     text NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    exit_code   integer,
    end_reason  text NOT NULL DEFAULT '',
    replica     text NOT NULL DEFAULT ''
);
CREATE INDEX sessions_open_user ON sessions (user_id) WHERE ended_at IS NULL;
CREATE INDEX sessions_instance ON sessions (instance_id, id);

-- +goose Down
DROP TABLE sessions;
