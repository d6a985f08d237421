-- A direct grant's report is one per agent run that served it: an agent
-- that restarts while a grant is still valid serves the client's new
-- connections under the same grant and reports them in a report of their
-- own, whose first connection is later. The reports are therefore keyed
-- by grant and first connection (cloud.SessionTx.RecordDirectReport); a
-- report sent again has the same first connection and is recorded once.
-- The rows recorded before this migration did not keep their first
-- connection: theirs is the zero time, which stands for any.

-- +goose Up
ALTER TABLE direct_reports ADD COLUMN first_at timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
ALTER TABLE direct_reports ALTER COLUMN first_at DROP DEFAULT;
ALTER TABLE direct_reports DROP CONSTRAINT direct_reports_pkey;
ALTER TABLE direct_reports ADD PRIMARY KEY (grant_id, first_at);

-- +goose Down
DELETE FROM direct_reports d WHERE EXISTS (SELECT 1 FROM direct_reports o
    WHERE o.grant_id = d.grant_id AND o.first_at < d.first_at);
ALTER TABLE direct_reports DROP CONSTRAINT direct_reports_pkey;
ALTER TABLE direct_reports DROP COLUMN first_at;
ALTER TABLE direct_reports ADD PRIMARY KEY (grant_id);
