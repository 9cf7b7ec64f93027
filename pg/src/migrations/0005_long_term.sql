-- Version 5: long-term memory beside the profile (issue 20): the dated
-- fact log, the versions kept for undo, and topic notes. Every row is
-- one user's (channel, user_key), removed with the user's row (`/session
-- clear all`, `mnemo sessions forget`).

-- The fact log (`ltm/facts/<user>.jsonl` on the files; same fields as its
-- entries): every change of a profile fact, dated, in `id` order. The
-- profile's bullets are exactly the live facts of these rows after each
-- of mnemo's writes (both change in one transaction).
CREATE TABLE mnemo_facts (
    channel     text        NOT NULL,
    user_key    text        NOT NULL,
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    ts          timestamptz NOT NULL,
    op          text        NOT NULL CHECK (op IN ('set', 'drop')),
    section     text        NOT NULL,
    key         text        NOT NULL,
    value       text        NOT NULL,
    sources     text[]      NOT NULL DEFAULT '{}',
    supersedes  text,
    by          text        NOT NULL,
    PRIMARY KEY (channel, user_key, id),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

-- Versions for `/session history` and `undo` (`ltm/versions/<user>/` on
-- the files): `file` names the document as the files would under `ltm/`
-- (`users/<user>.md`, `topics/<user>/<slug>.md`); `before` is its whole
-- previous text, NULL when it did not exist. `seq` counts up per user.
CREATE TABLE mnemo_versions (
    channel     text        NOT NULL,
    user_key    text        NOT NULL,
    seq         bigint      NOT NULL,
    ts          timestamptz NOT NULL,
    by          text        NOT NULL,
    what        text        NOT NULL,
    file        text        NOT NULL,
    before      text,
    PRIMARY KEY (channel, user_key, seq),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

-- Topic notes (`ltm/topics/<user>/<slug>.md` on the files): the whole
-- document (frontmatter and body) per user and slug.
CREATE TABLE mnemo_topics (
    channel     text        NOT NULL,
    user_key    text        NOT NULL,
    slug        text        NOT NULL,
    document    text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (channel, user_key, slug),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

-- The operator's notes every user of a channel may read and none may
-- change (`ltm/topics/_shared/<slug>.md` on the files): written by `mnemo
-- store copy`, found by recall and `memory_search` as shared notes.
CREATE TABLE mnemo_shared_topics (
    channel     text        NOT NULL,
    slug        text        NOT NULL,
    document    text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (channel, slug)
);
