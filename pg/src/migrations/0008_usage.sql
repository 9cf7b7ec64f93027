-- Version 8: model tokens spent (issue 40), for the daily token limits
-- and `mnemo sessions usage`. A user's rows are keyed by their own day
-- (midnight in their timezone) and go with the user (`/session clear
-- all`, `mnemo sessions forget`); the channel's totals, keyed by the
-- channel's day (the app's timezone), hold no user and stay. Every
-- broker adds with one INSERT … ON CONFLICT DO UPDATE, so concurrent
-- brokers sum, never overwrite.

CREATE TABLE mnemo_usage (
    channel    text   NOT NULL,
    user_key   text   NOT NULL,
    day        date   NOT NULL,
    purpose    text   NOT NULL,
    tokens_in  bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, user_key, day, purpose)
);

CREATE INDEX mnemo_usage_day ON mnemo_usage (channel, day);

CREATE TABLE mnemo_channel_usage (
    channel    text   NOT NULL,
    day        date   NOT NULL,
    purpose    text   NOT NULL,
    tokens_in  bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, day, purpose)
);
