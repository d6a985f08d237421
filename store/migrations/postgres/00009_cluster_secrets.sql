-- Secrets of the cloud itself, shared by every server replica: the
-- certificate authority's certificate and key (PEM), made by the first
-- replica that starts (Tx.CreateClusterSecret) and read by the others.

-- +goose Up
CREATE TABLE cluster_secrets (
    name       text COLLATE "C" NOT NULL PRIMARY KEY,
    value      text NOT NULL,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE cluster_secrets;
