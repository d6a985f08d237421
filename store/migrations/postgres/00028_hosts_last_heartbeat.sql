-- The heartbeat watcher reads only the hosts that went silent
-- (cloud.Tx.ListSilentHosts: last_heartbeat before the timeout's cut),
-- through this index, instead of every host with its spec: at thousands
-- of hosts, reading them all every few seconds cost a second of CPU and
-- serialization conflicts with the heartbeats' writes.

-- +goose Up
CREATE INDEX hosts_last_heartbeat ON hosts (last_heartbeat);

-- +goose Down
DROP INDEX hosts_last_heartbeat;
