-- Version 7: reminders (issue 39), the fields of
-- mnemo_sessions::reminders::Reminder as columns, and a user's own
-- timezone (`/session timezone`). A claim is the row's state turned to
-- 'sending' by one broker (FOR UPDATE SKIP LOCKED): no other broker and
-- no restart posts it again.

CREATE TABLE mnemo_reminders (
    channel    text        NOT NULL,
    user_key   text        NOT NULL,
    id         text        NOT NULL,
    text       text        NOT NULL,
    at         timestamptz NOT NULL,
    due        timestamptz NOT NULL,
    repeat     text,
    timezone   text        NOT NULL,
    chat_id    text        NOT NULL,
    thread_id  text,
    in_group   boolean     NOT NULL,
    created    timestamptz NOT NULL,
    state      text        NOT NULL CHECK (state IN ('active', 'sending', 'done')),
    claimed_at timestamptz,
    claimed_by text,
    attempts   integer     NOT NULL DEFAULT 0,
    missed     timestamptz,
    PRIMARY KEY (channel, user_key, id),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

-- What every broker asks each second: a channel's due reminders.
CREATE INDEX mnemo_reminders_due ON mnemo_reminders (channel, due) WHERE state = 'active';
-- Claims a dead broker left.
CREATE INDEX mnemo_reminders_claimed ON mnemo_reminders (channel, claimed_at) WHERE state = 'sending';

ALTER TABLE mnemo_users ADD COLUMN timezone text;

-- `/session undo` marks the version it took back instead of deleting it,
-- so `/session history` still shows the change (and the next undo goes
-- further back).
ALTER TABLE mnemo_versions ADD COLUMN undone_at timestamptz;
