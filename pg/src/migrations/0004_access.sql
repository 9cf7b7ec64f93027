-- Version 4: each channel's access rules and pairing state (the document
-- `access.json` holds on the file store), shared by every broker. No row:
-- the default rules, as with no file.
--
-- `revision` is set from a sequence on every insert and update, whoever
-- writes (mnemo, or an operator by hand): a broker's cache asks only
-- "still that revision?" once a second, and a deleted and re-created row
-- never comes back with a revision a cache already holds.

CREATE SEQUENCE mnemo_access_revision;

CREATE TABLE mnemo_access (
    channel    text        PRIMARY KEY,
    doc        jsonb       NOT NULL,
    revision   bigint      NOT NULL DEFAULT nextval('mnemo_access_revision'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION mnemo_access_revise() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.revision := nextval('mnemo_access_revision');
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER mnemo_access_revise BEFORE INSERT OR UPDATE ON mnemo_access
    FOR EACH ROW EXECUTE FUNCTION mnemo_access_revise();
