-- Join tokens count their joins (issue 21): max_uses is how many joins a
-- join token allows (0: any number, every other token and join tokens
-- made before this migration), uses how many it has made. A join counts
-- its use in its own transaction, with an UPDATE that succeeds only while
-- uses < max_uses, so two joins racing for a token's last use cannot both
-- win.

-- +goose Up
ALTER TABLE tokens ADD COLUMN max_uses integer NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN uses integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE tokens DROP COLUMN uses;
ALTER TABLE tokens DROP COLUMN max_uses;
