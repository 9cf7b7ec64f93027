-- Version 3: recall's full-text index scoped by user. A GIN index on
-- (channel, user_key, tsv) (btree_gin, in PostgreSQL's contrib, a trusted
-- extension since PostgreSQL 13) finds one user's matching messages
-- without visiting every other user's; the index on tsv alone made a
-- recall's cost grow with the whole database. Where btree_gin cannot be
-- had, the shared index stays (recall still works, and is scoped by user
-- in its WHERE) and `mnemo store status` says so.
DO $$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'btree_gin not installed (%): recall keeps the index shared by all users', SQLERRM;
        RETURN;
    END;
    CREATE INDEX mnemo_messages_user_tsv ON mnemo_messages USING gin (channel, user_key, tsv);
    DROP INDEX mnemo_messages_tsv;
END $$;
