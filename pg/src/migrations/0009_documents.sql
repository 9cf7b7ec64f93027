-- Version 9: documents a user sent (issue 36), `ltm/documents/<user>/<id>.md`
-- on the files: the record (name, type, pages, when, size) and the text,
-- and the text again in the pieces recall and search find (the pieces the
-- files store cuts, with their page). A document goes with its user
-- (`/session clear all`, `mnemo sessions forget`), its pieces with it.

CREATE TABLE mnemo_documents (
    channel   text        NOT NULL,
    user_key  text        NOT NULL,
    id        text        NOT NULL,
    name      text        NOT NULL,
    kind      text        NOT NULL,
    pages     integer,
    added_at  timestamptz NOT NULL,
    bytes     bigint      NOT NULL,
    chars     bigint      NOT NULL,
    body      text        NOT NULL,
    PRIMARY KEY (channel, user_key, id),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);

CREATE TABLE mnemo_document_pieces (
    channel   text    NOT NULL,
    user_key  text    NOT NULL,
    doc_id    text    NOT NULL,
    n         integer NOT NULL,
    page      integer,
    text      text    NOT NULL,
    tsv       tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    PRIMARY KEY (channel, user_key, doc_id, n),
    FOREIGN KEY (channel, user_key, doc_id) REFERENCES mnemo_documents ON DELETE CASCADE
);

-- A turn's search of one user's pieces: the primary key narrows to the
-- user, this to the words.
CREATE INDEX mnemo_document_pieces_tsv ON mnemo_document_pieces USING gin (tsv);

-- The files themselves, when the operator keeps them (`attachments.keep`;
-- `ltm/attachments/<user>/` on the files): the record and the bytes.
CREATE TABLE mnemo_kept_files (
    channel   text        NOT NULL,
    user_key  text        NOT NULL,
    id        text        NOT NULL,
    name      text        NOT NULL,
    kind      text        NOT NULL,
    mime      text,
    bytes     bigint      NOT NULL,
    added_at  timestamptz NOT NULL,
    data      bytea       NOT NULL,
    PRIMARY KEY (channel, user_key, id),
    FOREIGN KEY (channel, user_key) REFERENCES mnemo_users ON DELETE CASCADE
);
