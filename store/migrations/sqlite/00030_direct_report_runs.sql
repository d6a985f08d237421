-- A direct grant's report is one per agent run that served it: an agent
-- that restarts while a grant is still valid serves the client's new
-- connections under the same grant and reports them in a report of their
-- own, whose first connection is later. The reports are therefore keyed
-- by grant and first connection (cloud.SessionTx.RecordDirectReport); a
-- report sent again has the same first connection and is recorded once.
-- The rows recorded before this migration did not keep their first
-- connection: theirs is the zero time, which stands for any.

-- +goose Up
CREATE TABLE direct_reports_new (
    grant_id    TEXT NOT NULL,
    first_at    TEXT NOT NULL,
    host_id     TEXT NOT NULL,
    reported_at TEXT NOT NULL,
    PRIMARY KEY (grant_id, first_at)
);
INSERT INTO direct_reports_new (grant_id, first_at, host_id, reported_at)
    SELECT grant_id, '0001-01-01T00:00:00.000000Z', host_id, reported_at FROM direct_reports;
DROP TABLE direct_reports;
ALTER TABLE direct_reports_new RENAME TO direct_reports;

-- +goose Down
CREATE TABLE direct_reports_old (
    grant_id    TEXT NOT NULL PRIMARY KEY,
    host_id     TEXT NOT NULL,
    reported_at TEXT NOT NULL
);
INSERT INTO direct_reports_old (grant_id, host_id, reported_at)
    SELECT grant_id, host_id, MIN(reported_at) FROM direct_reports GROUP BY grant_id, host_id;
DROP TABLE direct_reports;
ALTER TABLE direct_reports_old RENAME TO direct_reports;
