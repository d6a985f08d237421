-- The host that holds each volume's data (issue 20, `volumes cp`): a
-- volume's directory lives on the host of the last instance placed with
-- it, and a copy into a detached volume goes to that host's agent. One row
-- per volume, written when the scheduler places an instance with it; the
-- row outlives the host's going (the copy then says the host is gone).

-- +goose Up
CREATE TABLE volume_hosts (
    volume_id  text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES volumes (id),
    host_id    text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE volume_hosts;
