-- mnemo's Postgres store, version 1. Users are keyed like the file layout:
-- the channel's name and the user's SafeName (the folder name under
-- sessions/), so `mnemo store copy` maps one onto the other.

-- One row per user of a channel: the counters and documents a turn reads.
CREATE TABLE mnemo_users (
    channel      text    NOT NULL,
    user_key     text    NOT NULL,
    -- The next message's sequence number: per user, strictly increasing,
    -- taken under this row's lock (the append's upsert).
    next_seq     bigint  NOT NULL DEFAULT 1,
    -- The rolling summary (summary.md's body) and when it was written.
    summary      text,
    summary_at   timestamptz,
    -- The long-term profile (ltm/profile.md's body).
    profile      text,
    profile_at   timestamptz,
    -- Folds committed so far: a fold commits only onto the count it read.
    folds        bigint  NOT NULL DEFAULT 0,
    -- Summarizer failures in a row (reset by a fold).
    failures     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, user_key)
);

-- Every message, short-term and archived: `fold` is NULL while it is in
-- short-term memory and names the fold that archived it after.
CREATE TABLE mnemo_messages (
    channel    text        NOT NULL,
    user_key   text        NOT NULL,
    seq        bigint      NOT NULL,
    ts         timestamptz NOT NULL,
    role       text        NOT NULL CHECK (role IN ('user', 'assistant')),
    text       text        NOT NULL,
    msg_id     text        NOT NULL,
    thread_id  text,
    chat_id    text,
    user_name  text,
    fold       bigint,
    -- Full-text recall: English stems and stop words, as the file store's
    -- index, computed by the database on insert.
    tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
    PRIMARY KEY (channel, user_key, seq),
    -- A platform's redelivery of a message is a no-op.
    UNIQUE (channel, user_key, msg_id),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);
CREATE INDEX mnemo_messages_unfolded ON mnemo_messages (channel, user_key, seq) WHERE fold IS NULL;
CREATE INDEX mnemo_messages_tsv ON mnemo_messages USING gin (tsv);

-- One row per fold: which messages it archived and how.
CREATE TABLE mnemo_folds (
    channel    text        NOT NULL,
    user_key   text        NOT NULL,
    fold       bigint      NOT NULL,
    first_seq  bigint      NOT NULL,
    last_seq   bigint      NOT NULL,
    messages   integer     NOT NULL,
    -- 'summarized': into the rolling summary; 'slid': archived unsummarized
    -- (compaction off, or the summarizer failing past stm.maxMessages).
    kind       text        NOT NULL CHECK (kind IN ('summarized', 'slid')),
    at         timestamptz NOT NULL,
    PRIMARY KEY (channel, user_key, fold),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);
