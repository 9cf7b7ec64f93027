-- Version 10: linked identities (issue 37). Platform accounts that share
-- one memory: each linked account names its home (the account whose
-- memory it uses). One-time codes are kept as their SHA-256 only, taken
-- once by a DELETE … RETURNING (two brokers cannot both take one), and
-- wrong codes are counted per account to lock out guessing. None of these
-- hold message text.

CREATE TABLE mnemo_links (
    channel      text        NOT NULL,
    user_key     text        NOT NULL,
    home_channel text        NOT NULL,
    home_user    text        NOT NULL,
    linked_at    timestamptz NOT NULL,
    PRIMARY KEY (channel, user_key)
);

CREATE INDEX mnemo_links_home ON mnemo_links (home_channel, home_user);

CREATE TABLE mnemo_link_codes (
    sha256     text        PRIMARY KEY,
    channel    text        NOT NULL,
    user_key   text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX mnemo_link_codes_account ON mnemo_link_codes (channel, user_key);

CREATE TABLE mnemo_link_failures (
    channel  text        NOT NULL,
    user_key text        NOT NULL,
    at       timestamptz NOT NULL
);

CREATE INDEX mnemo_link_failures_account ON mnemo_link_failures (channel, user_key, at);

-- A linked account's reminders are kept with its home's memory (maybe
-- another platform's store) and posted on the platform they were set on.
ALTER TABLE mnemo_reminders ADD COLUMN platform text;
