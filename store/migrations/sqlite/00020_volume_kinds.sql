-- Volumes gain a kind (cloud.Volume.Kind): 'block', a filesystem image on
-- one host attached to one instance at a time (every volume before this
-- migration), or 'shared', a directory on the operator's shared filesystem
-- that many instances mount at once.

-- +goose Up
ALTER TABLE volumes ADD COLUMN kind TEXT NOT NULL DEFAULT 'block';

-- +goose Down
ALTER TABLE volumes DROP COLUMN kind;
