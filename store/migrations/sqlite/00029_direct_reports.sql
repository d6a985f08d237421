-- The direct sessions' reports (cloud.SessionTx.RecordDirectReport): an
-- agent reports each grant it served once its grant has expired and its
-- last connection closed, and sends it again until the server answers, so
-- the server keeps which grants it has recorded and records each once.

-- +goose Up
CREATE TABLE direct_reports (
    grant_id    TEXT NOT NULL PRIMARY KEY,
    host_id     TEXT NOT NULL,
    reported_at TEXT NOT NULL
);

-- +goose Down
DROP TABLE direct_reports;
