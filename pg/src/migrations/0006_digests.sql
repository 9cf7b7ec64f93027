-- Version 6: daily and weekly summaries ("digests"), as the file store
-- keeps them in summaries/<user>/daily|weekly/, and what maintenance has
-- completed per channel (the file store's maintenance state file).

CREATE TABLE mnemo_digests (
    channel   text        NOT NULL,
    user_key  text        NOT NULL,
    kind      text        NOT NULL CHECK (kind IN ('daily', 'weekly')),
    -- '2026-03-01' for a local day, '2026-W09' for an ISO week.
    period    text        NOT NULL,
    -- The IANA zone the local day was cut in.
    timezone  text        NOT NULL,
    -- Messages summarized (a week: the sum over its dailies).
    messages  integer     NOT NULL,
    generated timestamptz NOT NULL,
    -- Set when the digest is not a summarizer's (the files' frontmatter
    -- `source`, e.g. expired-stm-summary), kept by `mnemo store copy`.
    source    text,
    body      text        NOT NULL,
    -- Recall searches digests beside messages: a user's (one a day, one
    -- a week) through the primary key, matched row by row, so no text
    -- index over every user's digests.
    tsv       tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, body)) STORED,
    PRIMARY KEY (channel, user_key, kind, period),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

-- A day's messages across a channel's users, for its dailies.
CREATE INDEX mnemo_messages_day ON mnemo_messages (channel, ts);

-- The watermarks (last day and week whose digests are complete) and the
-- failure counts of pending digests, as the JSON the file store's
-- maintenance state file holds.
CREATE TABLE mnemo_maintenance (
    channel    text        PRIMARY KEY,
    state      text        NOT NULL,
    updated_at timestamptz NOT NULL
);
