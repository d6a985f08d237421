-- Secrets of the cloud itself, shared by every server replica: the
-- certificate authority's certificate and key (PEM), made by the first
-- replica that starts (Tx.CreateClusterSecret) and read by the others.

-- +goose Up
CREATE TABLE cluster_secrets (
    name       TEXT NOT NULL PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- +goose Down
DROP TABLE cluster_secrets;
