-- The agent protocol: agent tokens are bound to the host they speak for
-- (host_id, '' for every other token), and instances keep their output in
-- instance_logs, one row per chunk. A chunk starts at byte offset pos of
-- the instance's output stream; chunks are contiguous, so the oldest kept
-- byte is MIN(pos) and the end of the stream MAX(pos + length(data)).

-- +goose Up
ALTER TABLE tokens ADD COLUMN host_id TEXT NOT NULL DEFAULT '';
CREATE INDEX tokens_host ON tokens (host_id);

CREATE TABLE instance_logs (
    instance_id TEXT    NOT NULL REFERENCES instances (id),
    pos         INTEGER NOT NULL,
    data        BLOB    NOT NULL,
    PRIMARY KEY (instance_id, pos)
) STRICT;

-- +goose Down
DROP TABLE instance_logs;
DROP INDEX tokens_host;
ALTER TABLE tokens DROP COLUMN host_id;
