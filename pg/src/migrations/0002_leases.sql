-- Version 2: leases for work one broker does at a time (a channel's
-- maintenance), and expiry as a kind of fold.

CREATE TABLE mnemo_leases (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- 'expired': short-term memory idle past scheduler.stmExpireDays, archived.
ALTER TABLE mnemo_folds DROP CONSTRAINT mnemo_folds_kind_check;
ALTER TABLE mnemo_folds ADD CONSTRAINT mnemo_folds_kind_check CHECK (kind IN ('summarized', 'slid', 'expired'));
